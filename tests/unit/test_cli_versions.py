"""``relayflow versions check`` and ``relayflow drain`` against an api that answers
``GET /versions`` as given: exit codes, what each says, progress as flows end."""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from relayflow.cli import commands, versions
from relayflow.cli.api import ApiError
from relayflow.core.flows import Registry
from tests.unit.test_versions import v1, v2

# The apps `--app` names: what a deploy would ship.
both = Registry([v1(), v2()])
v2_only = Registry([v2()])


def use(version: int, running: int = 0, *, newest: bool = False) -> dict[str, Any]:
    return {
        "flow": "orders",
        "version": version,
        "registered": True,
        "newest": newest,
        "running": {"PENDING": 0, "RUNNING": running, "COMPENSATING": 0},
        "total": running,
    }


@dataclass
class FakeApi:
    """Answers each GET with the next of ``answers`` (an exception is raised)."""

    answers: list[Any]
    base_url: str = "http://api.test"
    asked: list[tuple[str, Any]] = field(default_factory=list)

    def get(self, path: str, query: Any = None) -> dict[str, Any]:
        self.asked.append((path, query))
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return {"versions": answer}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApi]:
    api = FakeApi([[use(1, 3), use(2, 1, newest=True)]])
    monkeypatch.setattr(versions, "api", lambda: api)
    yield api


def test_check_fails_naming_each_dropped_version_and_its_flows(
    fake: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    code = commands.main(["versions", "check", "--app", "tests.unit.test_cli_versions:v2_only"])
    out = capsys.readouterr().out
    assert code == 1
    assert "error: tests.unit.test_cli_versions:v2_only no longer registers orders v1" in out
    assert "3 flows not ended run on it (RUNNING 3)" in out
    assert "relayflow drain --flow orders --version 1" in out
    assert fake.asked == [("/versions", None)]


def test_check_passes_when_the_new_app_keeps_every_version_flows_run_on(
    fake: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    code = commands.main(["versions", "check", "--app", "tests.unit.test_cli_versions:both"])
    out = capsys.readouterr().out
    assert code == 0
    assert "ok: no version that flows still run on is dropped" in out
    assert "error" not in out


def test_check_passes_once_the_dropped_version_has_drained(
    fake: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.answers = [[use(1, 0), use(2, 1, newest=True)]]
    code = commands.main(["versions", "check", "--app", "tests.unit.test_cli_versions:v2_only"])
    out = capsys.readouterr().out
    assert code == 0
    lines = out.splitlines()
    assert lines[1].split() == ["FLOW", "VERSION", "NOT", "ENDED", "DEPLOYED", "TO", "DEPLOY"]
    assert lines[2].split() == ["orders", "v1", "0", "yes", "dropped"]
    assert lines[3].split() == ["orders", "v2", "1", "(RUNNING", "1)", "newest", "kept"]


def test_dropping_the_idle_version_new_flows_start_on_is_a_warning(
    fake: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.answers = [[use(1, 0, newest=True)]]
    code = commands.main(["versions", "check", "--app", "tests.unit.test_cli_versions:v2_only"])
    out = capsys.readouterr().out
    assert code == 0
    assert "warning: orders v1 is the version the deployed app starts new orders flows on" in out


def test_an_api_without_the_versions_route_is_said_plainly_exit_2(
    fake: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.answers = [ApiError(404, "NOT_FOUND", "no route GET /versions")]
    code = commands.main(["versions", "check", "--app", "tests.unit.test_cli_versions:both"])
    assert code == 2
    assert "the api at http://api.test has no GET /versions" in capsys.readouterr().err


def test_an_app_that_does_not_load_is_a_usage_error(
    fake: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    code = commands.main(["versions", "check", "--app", "tests.unit.test_cli_versions:nope"])
    assert code == 2
    assert "has no attribute 'nope'" in capsys.readouterr().err
    assert fake.asked == []


def test_list_shows_the_flows_not_ended_on_each_version(
    fake: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    assert commands.main(["versions", "list", "--flow", "orders"]) == 0
    assert fake.asked == [("/versions", {"flow": "orders"})]
    assert "orders  v1       3 (RUNNING 3)  yes" in capsys.readouterr().out


# --- drain --------------------------------------------------------------------------------------


@dataclass
class Clock:
    now: float = 0.0
    slept: list[float] = field(default_factory=list)

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def drain(answers: list[Any], *, timeout_s: float = 60.0) -> tuple[int, str, Clock, FakeApi]:
    fake, clock, out = FakeApi(answers), Clock(), io.StringIO()
    code = versions.Drain(
        fake,  # type: ignore[arg-type]
        "orders",
        1,
        timeout_s=timeout_s,
        interval_s=5.0,
        out=out,
        sleep=clock.sleep,
        clock=lambda: clock.now,
    ).run()
    return code, out.getvalue(), clock, fake


def test_drain_shows_how_many_are_left_as_they_end_and_exits_0_when_none_is() -> None:
    code, out, clock, fake = drain([[use(1, 3)], [use(1, 3)], [use(1, 1)], [use(1, 0)]])
    assert code == 0
    assert out.splitlines() == [
        "orders v1: 3 not ended (RUNNING 3) (0s)",  # a line per change, not per count
        "orders v1: 1 not ended (RUNNING 1) (10s)",
        "orders v1: 0 not ended (15s)",
        "orders v1 is drained: no flow runs on it",
    ]
    assert clock.slept == [5.0, 5.0, 5.0]
    assert fake.asked[0] == ("/versions", {"flow": "orders", "version": 1})


def test_drain_gives_up_after_its_timeout_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, clock, _ = drain([[use(1, 2)]], timeout_s=12.0)
    assert code == 1
    assert clock.slept == [5.0, 5.0, 2.0]  # the last wait cut short to land on the timeout
    assert "still 2 after 12s" in capsys.readouterr().err


def test_the_drain_command_exits_1_when_flows_are_left_at_its_timeout(
    fake: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.answers = [[use(1, 2)]]
    argv = ["drain", "--flow", "orders", "--version", "1", "--timeout-s", "0.05"]
    assert commands.main([*argv, "--interval-s", "0.02"]) == 1
    printed = capsys.readouterr()
    assert printed.out.startswith("orders v1: 2 not ended (RUNNING 2) (0s)")
    assert "still 2 after 0s" in printed.err


def test_drain_of_the_newest_version_says_it_cannot_drain_yet() -> None:
    code, out, _, _ = drain([[use(1, 0, newest=True)]])
    assert code == 0
    assert out.startswith("note: v1 is the newest orders version the deployed app registers")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_drain_rewrites_one_line() -> None:
    out, clock = Terminal(), Clock()
    fake = FakeApi([[use(1, 12)], [use(1, 3)], [use(1, 0)]])
    drained = versions.Drain(
        fake,  # type: ignore[arg-type]
        "orders",
        1,
        timeout_s=60,
        interval_s=1,
        out=out,
        sleep=clock.sleep,
        clock=lambda: clock.now,
    )
    assert drained.run() == 0
    shown = out.getvalue()
    assert shown.count("\r") == 3 and shown.count("\n") == 2
    # A shorter line blanks what was left of the longer one before it.
    assert "\rorders v1: 3 not ended (RUNNING 3) (1s) " in shown

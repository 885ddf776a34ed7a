"""``relayflow bulk`` without a stack: its arguments checked before anything runs, the dry run
printed (counts and first rows) and run only when asked, a live progress line until done.
The api is a fake that answers as the real one does (tests/unit/test_bulk_api.py runs that)."""

from __future__ import annotations

import io
from typing import Any

import pytest

from relayflow.cli import bulk, commands
from relayflow.core.bulk import BULK_ID_PATTERN
from relayflow.web.params import FILTER_FIELDS


def row(i: int, **extra: Any) -> dict[str, Any]:
    return {
        "flow_id": f"reg-{i:03d}",
        "status": "FAILED",
        "code": "RETRIES_EXHAUSTED",
        "allowed": True,
        "rerun": ["register", "await_registration"],
        "undone": [],
        "kept": [],
        "outcome": None,
        "note": "",
        **extra,
    }


def bulk_doc(state: str = "previewed", **extra: Any) -> dict[str, Any]:
    return {
        "id": "bulk-0123456789ab",
        "action": "retry",
        "state": state,
        "by": "ana@example.com",
        "reason": "client API back",
        "filter": {"flow": "registration", "status": "FAILED"},
        "matched": 30,
        "allowed": 29,
        "refused": {"it is RUNNING: only an ended flow is retried": 1},
        "rate_per_s": 5.0,
        "batch_size": 10,
        "done": 0,
        "skipped": 0,
        "failed": 0,
        "waiting": "",
        "eta_s": None,
        **extra,
    }


class FakeApi:
    """Records what the CLI asks; answers POST /bulk with a dry run, GETs from a script."""

    def __init__(self, progress: list[dict[str, Any]] | None = None) -> None:
        self.posts: list[tuple[str, dict[str, Any]]] = []
        self.progress = progress or []

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.posts.append((path, body))
        if path == "/bulk":
            return {**bulk_doc(), "previews": [row(i) for i in range(25)]}
        return bulk_doc("running", run_by="ana@example.com")

    def get(self, path: str, query: Any = None) -> dict[str, Any]:
        return self.progress.pop(0)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    api = FakeApi()
    monkeypatch.setattr(bulk, "api", lambda: api)
    return api


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["bulk", "retry", "--status", "FAILED"], "required: --reason"),
        (["bulk", "retry", "--reason", "x", "--rate", "0"], "must be 0.01..50 flows a second"),
        (["bulk", "retry", "--reason", "x", "--since", "yesterday"], "is not an ISO 8601 time"),
        (["bulk", "cancel", "--reason", "x", "--status", "asleep"], "is not one of PENDING"),
        (["bulk", "status", "nope"], "is not a bulk action id (bulk-<12 hex>)"),
        (["bulk", "stop", "bulk-0123456789ab"], "required: --reason"),
        (["bulk"], "the following arguments are required"),
    ],
)
def test_bad_arguments_exit_2_before_anything_runs(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        commands.main(argv)
    assert exited.value.code == 2
    assert says in capsys.readouterr().err


def test_the_clis_bulk_rules_are_the_apis() -> None:
    assert f"^{commands.BULK_ID.pattern}$" == BULK_ID_PATTERN
    assert set(bulk.FILTERS) == set(FILTER_FIELDS)  # every filter the api takes, and only those


def test_a_dry_run_prints_the_counts_and_first_rows_and_runs_nothing(
    fake: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    since = "2026-03-01T12:00:00Z"
    argv = ["bulk", "retry", "--flow", "registration", "--status", "failed",
            "--since", since, "--reason", "client API back", "--dry-run"]  # fmt: skip
    assert commands.main(argv) == 0

    (path, body), *rest = fake.posts
    assert path == "/bulk" and not rest  # no run
    assert body == {
        "action": "retry",
        "filter": {"flow": "registration", "status": "FAILED", "updated_from": since},
        "reason": "client API back",
        "rate_per_s": 5.0,
        "dry_run": True,
    }
    out = capsys.readouterr().out
    assert "bulk retry bulk-0123456789ab  (previewed)  by ana@example.com" in out
    assert "matched  30: 29 to retry, 1 refused by the dry run" in out
    assert "refused  1: it is RUNNING: only an ended flow is retried" in out
    assert "reg-019" in out and "reg-020" not in out  # the first 20 rows
    assert "run register, await_registration" in out
    assert "... and 10 more" in out
    assert "run it: relayflow bulk run bulk-0123456789ab" in out


def test_without_a_terminal_to_confirm_on_it_runs_only_with_yes(
    fake: FakeApi, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    argv = ["bulk", "retry", "--status", "FAILED", "--reason", "back"]
    assert commands.main(argv) == 1
    assert [p for p, _ in fake.posts] == ["/bulk"]
    assert "add --yes" in capsys.readouterr().err

    assert commands.main([*argv, "--yes", "--rate", "2"]) == 0
    assert [p for p, _ in fake.posts][1:] == ["/bulk", "/bulk/bulk-0123456789ab:run"]
    assert fake.posts[1][1]["rate_per_s"] == 2.0


def test_stop_cancels_the_bulk_action_itself(fake: FakeApi) -> None:
    assert commands.main(["bulk", "stop", "bulk-0123456789ab", "--reason", "wrong filter"]) == 0
    assert fake.posts == [("/bulk/bulk-0123456789ab:cancel", {"reason": "wrong filter"})]


def test_follow_prints_progress_until_done() -> None:
    docs = [
        bulk_doc("running", done=10, eta_s=4.0),
        bulk_doc("running", done=20, waiting="client-api's breaker is open", eta_s=2.0),
        bulk_doc("done", done=29, skipped=1),
    ]
    out = io.StringIO()
    code = bulk.follow(FakeApi(docs), "bulk-0123456789ab", out=out, sleep=lambda s: None)  # type: ignore[arg-type]
    assert code == 0
    lines = out.getvalue().splitlines()
    assert lines[0] == (
        "bulk-0123456789ab retry running   10/30  done 10  skipped 0  failed 0  ~4s left"
    )
    assert "waiting: client-api's breaker is open" in lines[1]
    assert lines[2].startswith("bulk-0123456789ab retry done      30/30  done 29  skipped 1")


def test_a_row_refused_by_the_dry_run_says_why_and_one_done_says_what_happened() -> None:
    table = bulk.preview_table(
        [
            row(1, allowed=False, reason="it is RUNNING: only an ended flow is retried"),
            row(2, outcome="skipped", note="changed since the dry run"),
            row(3, rerun=[], undone=["register"], kept=["prepare"]),
        ]
    )
    lines = table.splitlines()
    assert lines[1].endswith("nothing: it is RUNNING: only an ended flow is retried")
    assert "skipped" in lines[2] and lines[2].endswith("(changed since the dry run)")
    assert lines[3].endswith("undo register; keep prepare")


def test_a_bulk_reset_names_its_step_and_finds_flows_by_label_and_code(fake: FakeApi) -> None:
    found_by = ["--label", "team=a", "--label", "region=eu", "--code", "DECLINED"]
    argv = ["bulk", "reset", "--to-step", "charge", "--keep-effects", *found_by,
            "--reason", "fixed", "--dry-run"]  # fmt: skip
    assert commands.main(argv) == 0
    (path, body), *_ = fake.posts
    assert (path, body["action"], body["step"], body["undo"]) == ("/bulk", "reset", "charge", False)
    assert body["filter"] == {"label": ["team=a", "region=eu"], "code": "DECLINED"}


def test_a_bulk_reset_needs_its_step(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        commands.main(["bulk", "reset", "--reason", "x", "--status", "FAILED"])
    assert "required: --to-step" in capsys.readouterr().err

"""The CLI without a stack: its arguments are checked before anything runs, its rules match
the core's, it prints the api's JSON, it follows a flow, and it imports nothing heavy."""

from __future__ import annotations

import io
import subprocess
import sys
from typing import Any

import pytest

from relayflow.cli import commands, operate, render
from relayflow.cli.api import Api, ApiUnreachable
from relayflow.cli.follow import Follower
from relayflow.core import labels
from relayflow.core.breaker_policy import DEPENDENCY_PATTERN
from relayflow.core.messages import MAX_DEADLINE_S
from relayflow.core.position import FLOW_ID_PATTERN, STEP_NAME_PATTERN, TaskKind
from relayflow.core.records import HistoryEntry
from relayflow.core.state import TERMINAL, Status
from relayflow.core.tenants import TENANT_PATTERN
from relayflow.gcp.sealer import TinkSealer
from relayflow.settings import Settings
from relayflow.web import params


def test_the_clis_own_rules_are_the_cores() -> None:
    assert commands.FLOW_ID.pattern == FLOW_ID_PATTERN[1:-1]
    assert commands.STEP.pattern == STEP_NAME_PATTERN[1:-1]
    assert commands.FLOW_NAME.pattern == params.FLOW_NAME.pattern
    assert commands.TENANT.pattern == TENANT_PATTERN[1:-1]
    assert commands.STATUSES == render.STATUSES == tuple(s.value for s in Status)
    assert {s.value for s in TERMINAL} == render.TERMINAL
    assert commands.MAX_DEADLINE_S == MAX_DEADLINE_S
    assert (commands.LABEL_KEY.pattern, commands.LABEL_VALUE.pattern) == (
        labels.KEY_PATTERN[1:-1],
        labels.VALUE_PATTERN[1:-1],
    )
    assert commands.MAX_LABELS == labels.MAX_LABELS
    assert commands.DEPENDENCY.pattern == DEPENDENCY_PATTERN[1:-1]
    assert commands.MAX_CODE_CHARS == params.MAX_CODE_CHARS
    kms_key_uri = Settings.model_fields["sensitive_key_uri"].metadata[0].pattern
    assert commands.KMS_KEY_URI.pattern == kms_key_uri[1:-1]
    assert (commands.MAX_LIST, commands.MAX_REASON_CHARS) == (
        params.MAX_LIMIT,
        params.MAX_REASON_CHARS,
    )


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["cancel", "f-1"], "the following arguments are required: --reason"),
        (["cancel", "f-1", "--reason", "  "], "say why: the reason is recorded"),
        (["retry", "bad/id", "--reason", "x"], "does not match"),
        (["list", "--updated-from", "yesterday"], "is not an ISO 8601 time"),
        (["list", "--limit", "501"], "is not an integer in 1..500"),
        (["list", "--cursor", "not a cursor!"], "not a cursor"),
        (["list", "--status", "asleep"], "is not one of PENDING, RUNNING"),
        (
            ["dead-letters", "replay", "m-1", "--reason", "x", "--edit-json", "[1]"],
            "must be a JSON object, got list",
        ),
        (["dead-letters"], "the following arguments are required"),
        (["rejected"], "the following arguments are required"),
        (["tenants", "pause", "acme"], "the following arguments are required: --reason"),
        (["tenants", "pause", "Acme Corp", "--reason", "x"], "is not a tenant name"),
        (["publish", "registration", "--priority", "urgent"], "invalid choice: 'urgent'"),
        (["list", "--tenant", "-x"], "expected one argument"),
        (["publish", "registration", "--label", "order_id"], "'order_id' is not key=value"),
        (["publish", "registration", "--label", "Order=1"], "label key 'Order' must match"),
        (["list", "--label", "order_id=a b"], "label order_id's value 'a b' must match"),
        (["list", "--dependency", "Payments"], "'Payments' is not a dependency"),
        (["list", "--code", ""], "a code is 1..100 printable characters"),
        (["keyset", "--kms-key-uri", "projects/p/keys/k"], "is not a Cloud KMS key URI"),
        (["reset", "f-1", "--reason", "x"], "the following arguments are required: --to-step"),
        (["reset", "f-1", "--to-step", "Charge!", "--reason", "x"], "is not a step name"),
        (["drain", "--flow", "orders"], "the following arguments are required: --version"),
        (["drain", "--flow", "orders", "--version", "0"], "is not a version"),
        (["drain", "--flow", "Orders", "--version", "1"], "is not a flow name"),
        (["drain", "--flow", "o", "--version", "1", "--timeout-s", "-1"], "must be in (0,"),
        (["versions"], "the following arguments are required"),
        (["versions", "list", "--flow", "Orders"], "is not a flow name"),
    ],
)
def test_bad_arguments_exit_2_before_anything_runs(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        commands.main(argv)
    assert exited.value.code == 2
    assert says in capsys.readouterr().err


def test_without_the_api_url_the_cli_says_where_to_get_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("RELAYFLOW_API_URL", raising=False)
    assert commands.main(["status", "f-1"]) == 2
    assert "source .relayflow/local/env" in capsys.readouterr().err


def test_an_api_that_does_not_answer_is_said_plainly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RELAYFLOW_API_URL", "http://127.0.0.1:9")  # discard: nothing listens
    assert commands.main(["list"]) == 2
    assert "the api at http://127.0.0.1:9 is not answering" in capsys.readouterr().err


def test_keyset_prints_a_keyset_the_services_read(capsys: pytest.CaptureFixture[str]) -> None:
    assert commands.main(["keyset"]) == 0
    sealer = TinkSealer.from_keyset(capsys.readouterr().out)
    assert sealer.open(sealer.seal(b"4111", b"ad"), b"ad") == b"4111"


def test_the_api_url_must_be_http() -> None:
    with pytest.raises(ApiUnreachable, match="is not an http"):
        Api.from_env({"RELAYFLOW_API_URL": "ftp://x"}, hint="")


def test_a_history_line_reads_as_before_with_who_did_it() -> None:
    entry = HistoryEntry.model_validate(
        {"at": "2026-03-01T16:46:59.447123Z", "step": "await_registration", "kind": "poll",
         "poll": 2, "outcome": "not ready: PENDING", "delay_s": 2.38}
    )  # fmt: skip
    assert render.entry(entry.model_dump(mode="json")) == (
        "  16:46:59.447  await_registration   poll 2       not ready: PENDING  next in 2.38s"
    )
    cancel = entry.model_copy(update={"kind": TaskKind.ACTION, "outcome": "cancelled",
                                      "detail": "dup", "by": "op@x", "delay_s": None})  # fmt: skip
    assert render.entry(cancel.model_dump(mode="json")).endswith(
        "action #0    cancelled (dup)  by op@x"
    )


class FakeApi:
    """Answers GET /flows/{id} from a script of documents."""

    def __init__(self, docs: list[dict[str, Any]]) -> None:
        self.docs = docs

    def get(self, path: str, query: Any = None) -> dict[str, Any]:
        return self.docs.pop(0)


def doc(status: str, outcomes: list[str]) -> dict[str, Any]:
    history = [
        {"at": f"2026-03-01T12:00:0{i}Z", "step": "s", "kind": "compensate", "outcome": o}
        for i, o in enumerate(outcomes)
    ]
    return {"flow_id": "f-1", "status": status, "history": history, "history_dropped": 0}


def test_wait_prints_each_new_entry_until_the_flow_ends() -> None:
    out = io.StringIO()
    fake = FakeApi(
        [doc("COMPENSATING", ["cancelled"]), doc("CANCELLED", ["cancelled", "compensated"])]
    )
    started = doc("COMPENSATING", ["cancelled"])
    code = operate._follow(fake, started, until=render.TERMINAL, out=out, sleep=lambda s: None)  # type: ignore[arg-type]
    assert code == 0
    lines = out.getvalue().splitlines()
    assert [line.split()[-1] for line in lines[:-1]] == ["compensated"]
    assert lines[-1] == "f-1 is CANCELLED"


def test_help_imports_no_google_client_nor_pydantic() -> None:
    # (site already loads the bare 'google' namespace packages, which cost nothing)
    heavy = ("google.api_core", "google.cloud.", "google.auth", "google.protobuf", "grpc",
             "pydantic", "flask", "opentelemetry", "requests")  # fmt: skip
    probe = (
        "import sys; from relayflow.cli import commands; commands.build_parser(); "
        "from relayflow.cli import operate; "
        f"print(sorted(m for m in sys.modules if m.startswith({heavy!r})))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert loaded.strip() == "[]"


def test_status_says_a_flow_waits_for_its_tenants_quota() -> None:
    doc = {
        "flow_id": "f-1",
        "flow": "registration",
        "status": "PENDING",
        "tenant": "acme",
        "priority": "high",
        "admission": "waiting",
        "queued_at": "2026-03-01T12:00:00+00:00",
        "position": {"step": "register", "kind": "action", "generation": 0},
    }
    shown = render.flow(doc)
    assert "tenant    acme (high priority)" in shown
    assert "waiting   for its tenant's quota (queued 2026-03-01T12:00:00+00:00)" in shown
    admitted = render.flow({**doc, "admission": "admitted"})
    assert "waiting" not in admitted


def test_the_tenants_table_shows_limits_state_and_counts() -> None:
    table = render.tenant_table(
        [
            {"tenant": "acme", "max_running": 50, "starts_per_s": 5.0, "priority": "high",
             "running": 50, "waiting": 950, "paused": False},
            {"tenant": "default", "max_running": 0, "starts_per_s": 0.0, "priority": "low",
             "running": 2, "waiting": 0, "paused": True, "paused_by": "op@x", "reason": "drill",
             "since": "2026-03-01T12:00:05+00:00"},
            {"tenant": "gamma", "max_running": 0, "starts_per_s": 0.0, "priority": "low",
             "running": 0, "waiting": 0, "paused": True, "configured_paused": True},
        ]
    )  # fmt: skip
    lines = table.splitlines()
    assert lines[1].split() == ["acme", "high", "50", "5.0", "50", "950", "active"]
    assert lines[2].split()[:6] == ["default", "low", "-", "-", "2", "0"]
    assert lines[2].endswith("paused by op@x: drill (since 2026-03-01 12:00:05)")
    assert lines[3].endswith("paused (configured)")


def test_status_shows_a_flows_clean_up_and_how_to_undo_again() -> None:
    ended = {
        **doc("FAILED", ["failed", "clean-up abandoned"]),
        "flow": "saga",
        "position": {"step": "charge", "kind": "compensate", "attempt": 2, "poll": 0},
    }
    pending = {
        **ended,
        "cleanup": {"state": "pending", "until": "2030-01-02T00:00:00Z", "tries": 3},
    }
    abandoned = {
        **ended,
        "cleanup": {
            "state": "abandoned",
            "finished_at": "2030-01-02T00:00:00Z",
            "left": ["charge", "reserve"],
            "reason": "its undo window closed; last: 503",
        },
    }
    assert "cleanup   pending: undoing what it left until 2030-01-02T00:00:00Z (3 failed" in (
        render.flow(pending)
    )
    shown = render.flow(abandoned)
    assert "left charge, reserve (may be live)" in shown
    assert "relayflow undo ID --reason" in shown
    assert "cleanup" not in render.flow(ended).split("history:")[0]


def test_undo_follows_the_clean_up_until_it_is_over() -> None:
    pending = {**doc("FAILED", ["undo requested"]), "cleanup": {"state": "pending"}}
    done = {**doc("FAILED", ["undo requested", "compensated", "clean-up done"])}
    done["cleanup"] = {"state": "done"}
    fake = FakeApi([done])
    out = io.StringIO()
    code = operate._follow(
        fake,  # type: ignore[arg-type]
        pending,
        until=render.TERMINAL,
        cleanup=True,
        out=out,
        sleep=lambda s: None,
    )
    assert code == 0 and fake.docs == []  # it read again: FAILED was not the end of it
    assert "compensated" in out.getvalue() and "clean-up done" in out.getvalue()


def test_migrate_shards_is_a_command_that_takes_no_arguments() -> None:
    from relayflow.cli import commands

    args = commands.build_parser().parse_args(["migrate-shards"])
    assert commands.COMMANDS[args.command] is commands.cmd_migrate_shards
    with pytest.raises(SystemExit):
        commands.build_parser().parse_args(["migrate-shards", "extra"])


def test_publish_refuses_a_label_given_twice(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["publish", "registration", "--label", "a=1", "--label", "a=2"]
    assert commands.main(argv) == 2
    assert "--label a is given twice ('1', '2')" in capsys.readouterr().err


def test_list_sends_every_label_and_the_code_and_dependency(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []

    class Recording(Api):
        def _call(self, method: str, path: str, data: bytes | None) -> dict[str, Any]:
            asked.append(path)
            return {"flows": [], "next_cursor": None}

    monkeypatch.setattr(operate, "api", lambda: Recording("http://api.invalid"))
    argv = ["list", "--label", "order_id=1", "--label", "region=eu", "--code", "DECLINED",
            "--dependency", "payments"]  # fmt: skip
    assert commands.main(argv) == 0
    (path,) = asked
    assert "label=order_id%3D1&label=region%3Deu" in path
    assert "code=DECLINED" in path and "dependency=payments" in path


def test_a_flows_labels_and_dependency_are_shown_by_status_list_and_watch() -> None:
    doc = {
        "flow_id": "f-1", "flow": "orders", "status": "FAILED", "dependency": "payments",
        "labels": {"region": "eu", "order_id": "1"}, "position": {"step": "pay", "kind": "action"},
        "history": [],
    }  # fmt: skip
    shown = render.flow(doc)
    assert "  labels    order_id=1 region=eu" in shown
    assert "  dependency payments (relayflow list --dependency)" in shown
    row = render.flow_table([{**doc, "position": "pay attempt 0", "code": "DECLINED"}])
    assert row.splitlines()[1].endswith("DECLINED              order_id=1 region=eu")
    follower = Follower()
    assert follower.document(doc)[0] == "  labels    order_id=1 region=eu"  # watch: once
    assert follower.document(doc) == []


def test_reset_prints_its_dry_run_first_and_stops_there_when_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    posted: list[dict[str, Any]] = []
    refused = {"key": "f-1", "action": "reset", "allowed": False, "reason": "the flow is RUNNING"}

    class Posting:
        def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
            posted.append({"path": path, **body})
            return refused

    monkeypatch.setattr(operate, "api", Posting)
    args = commands.build_parser().parse_args(
        ["reset", "f-1", "--to-step", "charge", "--reason", "redo", "--keep-effects"]
    )
    assert operate.cmd_reset(args) == 1
    assert posted == [
        {"path": "/flows/f-1:reset", "step": "charge", "reason": "redo", "undo": False,
         "dry_run": True}
    ]  # fmt: skip
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["FLOW", "ACTION", "OK", "RUN", "AGAIN", "UNDONE", "(NEWEST",
                              "FIRST)", "KEPT"]  # fmt: skip
    assert out[1].split(None, 3) == ["f-1", "reset", "no", "refused: the flow is RUNNING"]


def test_status_resolve_asks_the_api_to_read_offloaded_payloads_back(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asked: list[tuple[str, Any]] = []

    class Recording(FakeApi):
        def get(self, path: str, query: Any = None) -> dict[str, Any]:
            asked.append((path, query))
            return super().get(path, query)

    monkeypatch.setattr(operate, "api", lambda: Recording([doc("SUCCEEDED", ["ready"])] * 2))
    assert commands.main(["status", "f-1", "--json", "--resolve"]) == 0
    assert commands.main(["status", "f-1", "--json"]) == 0
    assert asked == [("/flows/f-1", {"resolve": "true"}), ("/flows/f-1", {})]

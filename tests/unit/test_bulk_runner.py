"""relayflow.core.bulk_runner through the harness, in virtual time: a dry run that changes
nothing and says per flow what would happen; a bulk retry and a bulk cancel acting on exactly
the previewed set, once per flow (a batch delivered again after a crash acts on nobody twice),
paced, put off while a dependency's breaker refuses; pause, resume, cancel; lost batches made
again by the sweep."""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

import pytest

from relayflow.core.breaker_policy import Dependencies
from relayflow.core.breaker_state import Breaker
from relayflow.core.bulk import BulkTask
from relayflow.core.bulk_runner import BulkRunner
from relayflow.core.bulk_state import BulkState, Outcome
from relayflow.core.errors import BulkRefused, NotReady, PermanentError
from relayflow.core.flows import ActionStep, Flow, PollPolicy, PollStep, StepContext
from relayflow.core.listing import FlowFilter
from relayflow.core.state import Status
from relayflow.testing import Harness
from tests.unit.test_breakers import DEP, POLICY, open_from_elsewhere


class ClientApi:
    """A client API that refuses registrations while ``down``, and counts what it holds."""

    def __init__(self) -> None:
        self.down = True
        self.registered: dict[str, int] = {}  # idempotency key -> times it made one

    def register(self, ctx: StepContext) -> dict[str, Any]:
        if self.down:
            raise PermanentError("client API unavailable", code="RETRIES_EXHAUSTED")
        self.registered[ctx.idempotency_key] = self.registered.get(ctx.idempotency_key, 0) + 1
        return {"id": f"reg-{ctx.flow_id}"}


def registration(api: ClientApi) -> Flow:
    return Flow(
        name="registration",
        steps=(
            ActionStep("prepare", lambda ctx: {"ok": True}, compensate=lambda ctx: {}),
            ActionStep("register", api.register, compensate=lambda ctx: {}, dependency=DEP),
            PollStep(
                "await_active",
                lambda ctx: {"active": True},
                policy=PollPolicy(initial_s=1, max_polls=5),
                dependency=DEP,
            ),
        ),
    )


def failed_flows(
    count: int, *, dependencies: Dependencies | None = None
) -> tuple[Harness, ClientApi, list[str]]:
    """``count`` flows FAILED by an outage of the client API (their register step refused)."""
    api = ClientApi()
    h = Harness(registration(api), dependencies=dependencies)
    flows = [h.start("registration", {"n": i}, flow_id=f"reg-{i:03d}") for i in range(count)]
    for flow_id in flows:
        assert h.run(flow_id).status is Status.FAILED  # type: ignore[union-attr]
    api.down = False
    return h, api, flows


def bulk_entries(h: Harness, flow_id: str, bulk_id: str) -> list[Any]:
    return [e for e in h.flow(flow_id).history if e.bulk == bulk_id]


def test_a_dry_run_changes_nothing_and_says_per_flow_what_a_retry_would_do() -> None:
    h, api, flows = failed_flows(3)
    running = h.start("registration", {}, flow_id="still-running")  # not failed: refused
    before = {f: h.flow(f).model_dump() for f in [*flows, running]}

    made = h.bulk("retry", dry_run=True, flow="registration", reason="client API back")

    assert made.state is BulkState.PREVIEWED
    assert (made.matched, made.allowed) == (4, 3)
    assert made.refused == {"it is PENDING: only an ended flow is retried": 1}
    assert {f: h.flow(f).model_dump() for f in before} == before  # nothing moved
    rows = {row.flow_id: row for row in h.bulk_rows(made.id)}
    row = rows["reg-000"]
    assert (row.allowed, row.status, row.generation, row.code) == (
        True,
        Status.FAILED,
        0,
        "RETRIES_EXHAUSTED",
    )
    # prepare is undone by the failure, so it runs again with everything after it
    assert row.rerun == ["prepare", "register", "await_active"]
    assert row.undone == [] and row.kept == []
    assert row.detail == {"generation": 1, "dependencies": [DEP]}
    assert not rows["still-running"].allowed
    assert not api.registered


def test_a_bulk_retry_succeeds_every_flow_once_each_with_one_audit_entry() -> None:
    h, api, flows = failed_flows(25)

    done = h.bulk("retry", status=Status.FAILED, reason="client API back", by="ana@example.com")
    h.run()

    assert done.state is BulkState.DONE
    assert (done.matched, done.done, done.skipped, done.failed) == (25, 25, 0, 0)
    assert {h.flow(f).status for f in flows} == {Status.SUCCEEDED}
    assert sorted(api.registered.values()) == [1] * 25  # one registration each, no duplicate
    for flow_id in flows:
        (entry,) = bulk_entries(h, flow_id, done.id)
        assert (entry.outcome, entry.by) == ("restarted", "ana@example.com")
        assert entry.detail == f"generation 1: bulk retry {done.id}: client API back"
    assert {row.outcome for row in h.bulk_rows(done.id)} == {Outcome.DONE}


def test_flows_start_at_the_rate_and_the_bulk_document_is_written_once_a_batch() -> None:
    h, _, _ = failed_flows(25)
    rate = 5.0  # a batch of 10 flows every 2 s, each flow's first step 0.2 s after the last

    done = h.bulk("retry", status=Status.FAILED, rate_per_s=rate)
    h.run()

    firsts = sorted(  # when each flow's first step ran again (its history says)
        next(e.at for e in h.flow(f).history if e.step == "prepare" and e.generation == 1)
        for f in h.store.docs
    )
    assert len(firsts) == 25 and done.batch_size == 10 and done.batches == 3
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(firsts)]
    assert min(gaps) >= 1 / rate - 1e-6  # never two flows sooner than the rate allows
    assert (firsts[-1] - firsts[0]).total_seconds() < 25 / rate + 1.0  # nor much later
    # the run's write, one per batch (the last also ends it): never one per flow
    assert h.bulk_store.writes == 1 + done.batches


def test_a_batch_delivered_again_after_a_crash_acts_on_no_flow_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h, api, flows = failed_flows(12)
    api.down = True  # the retried flows fail again: a second retry would show
    made = h.bulk("retry", status=Status.FAILED, rate_per_s=5, dry_run=True)  # 10 a batch
    h.bulk_runner.run(made.id, by="ana@example.com")
    task = BulkTask(bulk_id=made.id, batch=0)

    # the worker dies after acting on every flow of the batch, before it records anything
    def killed(*_: Any, **__: Any) -> None:
        raise ConnectionError("worker killed")

    monkeypatch.setattr(BulkRunner, "_write_rows", killed)
    with pytest.raises(ConnectionError):
        h.deliver_bulk_task(task)
    monkeypatch.undo()
    h.run()  # the retried flows fail again meanwhile
    assert {h.flow(f).status for f in flows} == {Status.FAILED}

    # Cloud Tasks delivers the batch again, twice even
    first = h.deliver_bulk_task(task)
    second = h.deliver_bulk_task(task)

    assert (first.outcome, first.done) == ("acted", 10)
    assert second.outcome == "stale"
    action = h.run_bulk(made.id)
    assert (action.state, action.done, action.skipped) == (BulkState.DONE, 12, 0)
    for flow_id in flows:
        assert len(bulk_entries(h, flow_id, made.id)) == 1
        assert h.flow(flow_id).position.generation == 1  # retried once, not twice
    notes = [row.note for row in h.bulk_rows(made.id)]
    assert notes == ["acted on by an earlier delivery of its batch"] * 10 + ["", ""]


def test_a_flow_that_changed_since_the_dry_run_is_skipped_with_why() -> None:
    h, _, flows = failed_flows(3)
    made = h.bulk("retry", status=Status.FAILED, dry_run=True)
    h.engine.retry(flows[0], reason="by hand", by="bo@example.com")  # someone was quicker
    h.run(flows[0])

    h.bulk_runner.run(made.id, by="ana@example.com")
    done = h.run_bulk(made.id)

    assert (done.done, done.skipped) == (2, 1)
    (why,) = done.skipped_why
    assert why.startswith("changed since the dry run: FAILED (generation 0) then, SUCCEEDED")
    assert not bulk_entries(h, flows[0], made.id)


def test_a_batch_is_put_off_while_its_dependencys_breaker_is_open() -> None:
    h, _, flows = failed_flows(4, dependencies=Dependencies(dependencies={DEP: POLICY}))
    made = h.bulk("retry", status=Status.FAILED, dry_run=True)
    open_from_elsewhere(h)
    h.advance(1.5)  # this instance reads the shared breaker at most once a second
    h.bulk_runner.run(made.id, by="ana@example.com")

    report = h.deliver_batch()

    assert report is not None and report.outcome == "put_off"
    waiting = h.bulk_runner.get(made.id)
    assert waiting.waiting == f"{DEP}'s breaker is open" and waiting.deferrals == 1
    assert {h.flow(f).status for f in flows} == {Status.FAILED}  # not one flow started
    assert h.breaker(DEP).state is Breaker.OPEN  # asking took no probe
    (queued,) = h.bulk_queue.tasks.values()
    assert queued.task.deferral == 1 and queued.run_at > h.now

    # the breaker half-opens and closes once its probes succeed; the batch then runs
    h.advance(60)
    h.start("registration", {}, flow_id="probe-1")
    h.run()
    assert h.breaker(DEP).state is Breaker.CLOSED
    done = h.run_bulk(made.id)
    assert done.done == 4


def test_a_bulk_cancel_undoes_what_each_flow_did_as_its_preview_said() -> None:
    api = ClientApi()
    api.down = False
    h = Harness(registration(api))
    h.script("await_active", NotReady("pending"))
    flows = [h.start("registration", {}, flow_id=f"c-{i}") for i in range(3)]
    for flow_id in flows:
        for _ in range(3):
            h.deliver_next(flow_id)  # prepare, register, a poll

    made = h.bulk("cancel", status=Status.RUNNING, dry_run=True, reason="bad batch")
    (row, *_) = h.bulk_rows(made.id)
    assert (row.undone, row.kept, row.rerun) == (["register", "prepare"], [], [])
    h.bulk_runner.run(made.id, by="ana@example.com")
    done = h.run_bulk(made.id)
    h.run()

    assert done.done == 3
    assert {h.flow(f).status for f in flows} == {Status.CANCELLED}
    undone = [c.step for c in h.calls if c.kind == "compensate" and c.context.flow_id == flows[0]]
    assert undone == ["register", "prepare"]


def test_pause_resume_and_cancel_of_a_bulk_action() -> None:
    h, _, flows = failed_flows(6)
    runner = h.bulk_runner
    made = h.bulk("retry", status=Status.FAILED, rate_per_s=1, dry_run=True)  # 2 a batch
    runner.run(made.id, by="ana")
    h.deliver_batch()

    paused = runner.pause(made.id, by="ana", reason="let it settle")
    assert paused.state is BulkState.PAUSED
    assert h.run_bulk(made.id).done == 2  # its queued batch does nothing while paused
    h.deliver_batch()
    assert runner.get(made.id).done == 2

    resumed = runner.resume(made.id, by="bo")
    assert (resumed.state, resumed.round) == (BulkState.RUNNING, 1)
    h.deliver_batch()
    cancelled = runner.cancel(made.id, by="bo", reason="enough")
    assert (cancelled.state, cancelled.done) == (BulkState.CANCELLED, 4)
    assert h.deliver_batch() is not None and runner.get(made.id).done == 4
    assert [e.what for e in cancelled.log] == ["previewed", "run", "paused", "resumed", "cancelled"]
    with pytest.raises(BulkRefused, match="is cancelled: only a previewed one can run"):
        runner.run(made.id, by="ana")
    assert sum(h.flow(f).position.generation for f in flows) == 4


def test_the_sweep_makes_a_lost_batch_again_under_a_new_name() -> None:
    h, _, _ = failed_flows(2)
    made = h.bulk("retry", status=Status.FAILED, dry_run=True)
    h.bulk_runner.run(made.id, by="ana")
    (lost,) = list(h.bulk_queue.tasks)
    del h.bulk_queue.tasks[lost]  # purged by hand: its name stays spent

    assert h.bulk_runner.sweep() == 0  # not late yet
    h.advance(400)
    assert h.bulk_runner.sweep() == 1

    assert h.run_bulk(made.id).done == 2


def test_a_dry_run_over_too_many_flows_is_refused_with_what_to_do() -> None:
    h, _, _ = failed_flows(3)
    runner = BulkRunner(h.engine, h.bulk_store, h.store, h.bulk_queue, h.clock, max_flows=2)
    with pytest.raises(BulkRefused, match=r"more than 2 flows match: .* narrow the filter"):
        runner.create("retry", FlowFilter(status=Status.FAILED), reason="x", by="ana")
    assert not h.bulk_store.actions and not h.bulk_store.chunks  # nothing stored


@pytest.mark.parametrize(
    ("action", "rate", "message"),
    [
        ("restart", 5.0, "action must be one of retry, cancel, reset"),
        ("retry", 0.0, "rate_per_s must be 0.01..50"),
        ("retry", 1000.0, "rate_per_s must be 0.01..50"),
    ],
)
def test_a_bad_action_or_rate_is_refused(action: str, rate: float, message: str) -> None:
    h, _, _ = failed_flows(1)
    with pytest.raises(BulkRefused, match=message):
        h.bulk(action, rate_per_s=rate, dry_run=True)


def test_a_bulk_action_over_no_flow_is_done_as_soon_as_it_runs() -> None:
    h, _, _ = failed_flows(1)
    done = h.bulk("retry", status=Status.TIMED_OUT)
    assert (done.state, done.matched, done.chunks) == (BulkState.DONE, 0, 0)
    assert h.bulk_runner.rows(done.id, 0) == []
    assert done.finished_at is not None and done.finished_at - h.now <= timedelta(0)


def test_a_bulk_reset_undoes_and_reruns_from_the_step_as_each_flows_row_said() -> None:
    api = ClientApi()
    api.down = False
    h = Harness(registration(api))
    flows = [h.start("registration", {}, flow_id=f"r-{i}") for i in range(4)]
    for flow_id in flows:
        assert h.run(flow_id).status is Status.SUCCEEDED  # type: ignore[union-attr]

    made = h.bulk("reset", step="register", status=Status.SUCCEEDED, dry_run=True)
    (row, *_) = h.bulk_rows(made.id)
    assert (row.rerun, row.undone, row.kept) == (
        ["register", "await_active"],
        ["register"],
        ["prepare"],
    )
    assert row.detail["dependencies"] == [DEP] and row.detail["step"] == "register"
    h.bulk_runner.run(made.id, by="ana@example.com")
    done = h.run_bulk(made.id)
    h.run()

    assert (done.done, done.step, done.undo) == (4, "register", True)
    for flow_id in flows:
        record = h.flow(flow_id)
        assert (record.status, record.position.generation) == (Status.SUCCEEDED, 1)
        (entry,) = bulk_entries(h, flow_id, made.id)
        assert (entry.outcome, entry.by) == ("reset", "ana@example.com")
    undone = [c for c in h.calls if c.kind == "compensate" and c.step == "register"]
    assert len(undone) == 4  # each flow's registration undone once, then made again
    assert sum(api.registered.values()) == 8


def test_a_bulk_action_finds_flows_by_their_code_and_labels() -> None:
    api = ClientApi()
    h = Harness(registration(api))
    for i in range(3):
        h.start("registration", {}, flow_id=f"eu-{i}", labels={"region": "eu"})
    h.start("registration", {}, flow_id="us-0", labels={"region": "us"})
    h.run()
    api.down = False

    by_label = h.bulk("retry", dry_run=True, labels=(("region", "eu"),))
    by_code = h.bulk("retry", dry_run=True, code="RETRIES_EXHAUSTED")

    assert sorted(r.flow_id for r in h.bulk_rows(by_label.id)) == ["eu-0", "eu-1", "eu-2"]
    assert by_label.filter == {"labels": [{"pair": ["region", "eu"]}]}
    assert by_code.matched == 4
    assert h.bulk_runner.run(by_label.id, by="ana") and h.run_bulk(by_label.id).done == 3


def test_a_reset_names_its_step_and_nothing_else_does() -> None:
    h, _, _ = failed_flows(1)
    with pytest.raises(BulkRefused, match="a reset, and only a reset, names the step"):
        h.bulk("reset", dry_run=True, status=Status.FAILED)
    with pytest.raises(BulkRefused, match="a reset, and only a reset, names the step"):
        h.bulk("retry", step="register", dry_run=True, status=Status.FAILED)

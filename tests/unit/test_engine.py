"""engine against in-memory ports: idempotent starts, position checks, one result event.

The flow is ``reserve`` (action, compensated) -> ``await_ready`` (poll) -> ``finish`` (action);
each handler plays a script. Time is a FakeClock that moves to each task's ``run_at``.
"""

from __future__ import annotations

import base64
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from relayflow.core.clock import FakeClock
from relayflow.core.engine import Ran, Started, idempotency_key
from relayflow.core.errors import (
    FlowNotFound,
    InvalidTransition,
    NotReady,
    PermanentError,
    RetryableError,
    UnknownFlow,
)
from relayflow.core.flows import (
    ActionStep,
    Flow,
    PollPolicy,
    PollStep,
    RetryPolicy,
    StepContext,
)
from relayflow.core.ports import Enqueued
from relayflow.core.position import FLOW_ID_PATTERN, TaskKind, TaskPayload
from relayflow.core.records import FlowRecord
from relayflow.core.state import Status

from .fakes import FakeEvents, FakeQueue, FakeStore, ScriptedHandler, engine_over

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
INCARNATION = f"{int(NOW.timestamp() * 1000):x}"  # the flows here are created at NOW
RETRY = RetryPolicy(max_attempts=3, initial_s=1.0, multiplier=2.0, max_interval_s=10.0, jitter=0)
POLL = PollPolicy(initial_s=1.0, multiplier=2.0, max_interval_s=30.0, max_polls=20)
START = {"flow": "demo", "input": {"resource": "acme-1"}}


def encode(value: Any) -> bytes:
    return json.dumps(value).encode("utf-8")


class Harness:
    """An engine over fakes, with scripted handlers and helpers to deliver queued tasks."""

    def __init__(self) -> None:
        self.clock = FakeClock(NOW)
        self.store = FakeStore()
        self.queue = FakeQueue()
        self.events = FakeEvents()
        self.reserve = ScriptedHandler([{"reservation": "r-1"}])
        self.release = ScriptedHandler([{"released": True}])
        self.await_ready = ScriptedHandler([{"state": "READY"}])
        self.finish = ScriptedHandler([{"entity": "e-1"}])
        flow = Flow(
            name="demo",
            steps=(
                ActionStep("reserve", self.reserve, retry=RETRY, compensate=self.release),
                PollStep("await_ready", self.await_ready, policy=POLL),
                ActionStep("finish", self.finish, retry=RETRY),
            ),
        )
        self.engine = engine_over(
            flow, store=self.store, queue=self.queue, events=self.events, clock=self.clock
        )

    def start(self, body: Any = START, message_id: str = "1001") -> Any:
        data = body if isinstance(body, bytes) else encode(body)
        return self.engine.start(data, message_id=message_id, attributes={"origin": "test"})

    def next_payload(self, flow_id: str = "1001") -> TaskPayload:
        """Dispatch the flow's queued task, first moving the clock to when it is due."""
        task = self.queue.only(flow_id)
        if task.next.run_at > self.clock.now():
            self.clock.advance((task.next.run_at - self.clock.now()).total_seconds())
        return self.queue.take(task.next.task_id)

    def deliver(self, flow_id: str = "1001") -> Ran:
        return self.engine.run_task(self.next_payload(flow_id))

    def record(self, flow_id: str = "1001") -> FlowRecord:
        record = self.store.get(flow_id)
        assert record is not None
        return record


@pytest.fixture
def h() -> Harness:
    return Harness()


# -- start ------------------------------------------------------------------------------------


def test_start_creates_one_pending_flow_and_ensures_its_first_task(h: Harness) -> None:
    result = h.start()
    assert (result.outcome, result.flow_id) == (Started.STARTED, "1001")
    record = h.record()
    assert record.status is Status.PENDING
    assert (record.flow, record.input, record.message_id) == ("demo", START["input"], "1001")
    assert list(h.store.docs) == ["1001"]
    task = h.queue.only()
    assert task.next == record.next
    assert (task.next.queue, task.next.run_at) == ("q-steps", NOW)
    assert [outcome for _, _, outcome in h.queue.ensured] == [Enqueued.CREATED]
    assert h.events.published == []


def test_start_uses_the_flow_id_from_the_message_when_given(h: Harness) -> None:
    result = h.start({**START, "flow_id": "order-42"})
    assert result.flow_id == "order-42"
    assert h.queue.only().flow_id == "order-42"


def test_a_message_id_that_cannot_be_a_flow_id_is_turned_into_one(h: Harness) -> None:
    result = h.start(message_id="projects/p/messages/7:1")
    assert result.flow_id is not None
    assert re.match(FLOW_ID_PATTERN, result.flow_id)
    assert h.start(message_id="projects/p/messages/7:1").flow_id == result.flow_id


def test_the_same_message_twice_is_one_flow_and_its_first_task_re_ensured(h: Harness) -> None:
    first = h.start()
    second = h.start()
    assert first.outcome is Started.STARTED
    assert (second.outcome, second.flow_id) == (Started.DUPLICATE, "1001")
    assert list(h.store.docs) == ["1001"]
    (_, a, created), (_, b, again) = h.queue.ensured
    assert a == b
    assert (created, again) == (Enqueued.CREATED, Enqueued.ALREADY_ENQUEUED)
    assert len(h.queue.tasks) == 1


def test_a_duplicate_start_after_progress_does_not_rewind_the_flow(h: Harness) -> None:
    h.start()
    h.deliver()
    before = h.store.docs["1001"]
    assert h.start().outcome is Started.DUPLICATE
    assert h.store.docs["1001"] == before
    assert len(h.reserve.calls) == 1


def test_a_reused_flow_id_with_a_different_input_is_rejected_not_dropped(h: Harness) -> None:
    h.start({**START, "flow_id": "order-42"})
    other = {**START, "flow_id": "order-42", "input": {"resource": "other-9"}}
    result = h.start(other, message_id="1002")
    assert result.outcome is Started.REJECTED
    assert result.reason is not None and "already names a 'demo' flow" in result.reason
    assert h.record("order-42").input == START["input"]
    assert h.store.rejected["1002"]["reason"] == result.reason


@pytest.mark.parametrize(
    ("data", "mentions"),
    [
        (b"not json", "not JSON"),
        (encode({"flow": "payment", "input": {}}), "unknown flow 'payment' (registered: demo)"),
        (encode({**START, "deadline_s": -1}), "deadline_s"),
    ],
)
def test_a_malformed_message_is_rejected_and_recorded_without_a_flow(
    h: Harness, data: bytes, mentions: str
) -> None:
    result = h.start(data, message_id="2002")
    assert result.outcome is Started.REJECTED
    assert result.reason is not None and mentions in result.reason
    assert h.store.docs == {}
    assert h.queue.tasks == {} and h.events.published == []
    (record,) = h.store.rejected.values()
    assert record["message_id"] == "2002"
    assert record["reason"] == result.reason
    assert base64.b64decode(record["data_base64"]) == data
    assert record["data_truncated"] is False
    assert record["attributes"] == [{"key": "origin", "value": "test"}]
    assert record["rejected_at"] == NOW


# -- running tasks ----------------------------------------------------------------------------


def test_a_whole_flow_runs_to_success_and_publishes_its_result_once(h: Harness) -> None:
    h.await_ready.script = [NotReady("PENDING"), {"state": "READY"}]
    h.start()
    assert [h.deliver() for _ in range(4)] == [Ran.ADVANCED] * 4
    record = h.record()
    assert record.status is Status.SUCCEEDED
    assert h.queue.tasks == {}
    (event,) = h.events.published
    assert event["status"] == "SUCCEEDED" and event["code"] == "OK"
    assert event["data"] == {"entity": "e-1"}  # the final step's output
    assert record.result_published is True


def test_a_handler_sees_its_input_earlier_outputs_and_an_idempotency_key(h: Harness) -> None:
    h.start()
    h.deliver()
    h.deliver()
    h.deliver()
    (ctx,) = h.finish.calls
    assert isinstance(ctx, StepContext)
    assert (ctx.flow_id, ctx.flow, ctx.step) == ("1001", "demo", "finish")
    assert ctx.input == {"resource": "acme-1"}
    assert ctx.outputs == {"reserve": {"reservation": "r-1"}, "await_ready": {"state": "READY"}}
    assert ctx.idempotency_key == f"relayflow-1001-{INCARNATION}-finish-e0"


def test_idempotency_keys_differ_for_a_compensation_but_not_for_a_retry_or_generation(
    h: Harness,
) -> None:
    h.start()
    position = h.record().position
    record = h.record()
    keys = {
        idempotency_key(record, position),
        idempotency_key(record, position.model_copy(update={"kind": TaskKind.COMPENSATE})),
        idempotency_key(record, position.model_copy(update={"generation": 1})),
        idempotency_key(record, position.model_copy(update={"attempt": 2})),
    }
    # Retries, and a new generation while the effect may be live, share a key: the API
    # replays the effect instead of making a second one.
    assert len(keys) == 2


def test_a_flow_id_reused_after_its_document_expired_gets_new_keys(h: Harness) -> None:
    # given a flow, and a later flow under the same id (the first document deleted by TTL)
    h.start()
    first = h.record()
    reborn = first.model_copy(update={"created_at": first.created_at + timedelta(days=31)})
    # then their keys differ, so an API that keeps keys for long does not replay old effects
    assert idempotency_key(first, first.position) != idempotency_key(reborn, reborn.position)


def test_a_not_ready_poll_enqueues_the_next_poll_at_the_jittered_time(h: Harness) -> None:
    h.await_ready.script = [NotReady("PENDING")]
    h.start()
    h.deliver()
    at = h.clock.now()
    assert h.deliver() is Ran.ADVANCED
    task = h.queue.only()
    assert task.next.queue == "q-polls"
    assert task.next.position.poll == 1
    assert task.next.run_at == at + timedelta(seconds=POLL.delay_s(n=0, key="1001:await_ready"))


def test_a_stale_task_is_a_no_op_and_does_not_call_the_handler(h: Harness) -> None:
    # given the first task ran and the flow moved on
    h.start()
    first = h.next_payload()
    assert h.engine.run_task(first) is Ran.ADVANCED
    before = dict(h.store.docs["1001"])
    ensured = len(h.queue.ensured)
    # when the same task is delivered again
    outcome = h.engine.run_task(first)
    # then nothing runs and nothing changes, but the current next task is re-ensured
    assert outcome is Ran.STALE
    assert len(h.reserve.calls) == 1
    assert h.await_ready.calls == []
    assert h.store.docs["1001"] == before
    assert len(h.queue.ensured) == ensured + 1
    assert h.queue.ensured[-1][2] is Enqueued.ALREADY_ENQUEUED


def test_a_task_from_a_position_the_flow_never_reached_is_stale(h: Harness) -> None:
    h.start()
    position = h.record().position.model_copy(update={"attempt": 2})
    assert h.engine.run_task(TaskPayload(flow_id="1001", position=position)) is Ran.STALE
    assert h.reserve.calls == []


def test_a_task_for_an_unknown_flow_is_dropped(h: Harness) -> None:
    h.start()
    payload = h.next_payload()
    other = TaskPayload(flow_id="nobody", position=payload.position)
    assert h.engine.run_task(other) is Ran.NO_FLOW


def test_an_unexpected_handler_exception_is_retried_then_bounded(h: Harness) -> None:
    # given a handler with a bug
    h.reserve.script = [KeyError("boom")]
    h.start()
    # when its task runs, it is retried like a retryable error
    assert h.deliver() is Ran.ADVANCED
    record = h.record()
    assert record.status is Status.RUNNING
    assert record.position.attempt == 1
    assert record.history[-1].detail == "KeyError: 'boom'"
    assert record.next is not None and record.next.run_at == h.clock.now() + timedelta(seconds=1)
    # and after max_attempts (3) tries the flow fails instead of retrying forever, first
    # undoing the step, whose effect is unknown (a crashed call may have landed)
    h.deliver()
    h.deliver()
    assert h.record().status is Status.COMPENSATING
    h.deliver()
    record = h.record()
    assert len(h.reserve.calls) == 3
    assert len(h.release.calls) == 1
    assert record.status is Status.FAILED
    assert record.result is not None and record.result.code == "RETRIES_EXHAUSTED"
    assert h.queue.tasks == {}
    assert [e["code"] for e in h.events.published] == ["RETRIES_EXHAUSTED"]


def test_a_permanent_error_runs_the_compensation_then_fails(h: Harness) -> None:
    h.finish.script = [PermanentError("entity rejected", code="ENTITY_REJECTED")]
    h.start()
    for _ in range(3):
        h.deliver()
    assert h.record().status is Status.COMPENSATING
    assert h.queue.only().next.position.kind is TaskKind.COMPENSATE
    h.deliver()
    assert h.release.calls[0].idempotency_key == f"relayflow-1001-{INCARNATION}-reserve-e0:undo"
    assert h.record().status is Status.FAILED
    assert [e["code"] for e in h.events.published] == ["ENTITY_REJECTED"]


def test_a_retryable_error_is_retried_after_retry_after(h: Harness) -> None:
    h.reserve.script = [RetryableError("429", retry_after_s=30), {"reservation": "r-1"}]
    h.start()
    h.deliver()
    assert h.queue.only().next.run_at == NOW + timedelta(seconds=30)


def test_the_final_task_delivered_twice_publishes_exactly_one_result(h: Harness) -> None:
    h.start()
    h.deliver()
    h.deliver()
    final = h.next_payload()
    assert h.engine.run_task(final) is Ran.ADVANCED
    assert h.engine.run_task(final) is Ran.STALE
    assert len(h.finish.calls) == 1
    assert len(h.events.published) == 1


def test_a_result_that_failed_to_publish_goes_out_when_the_task_is_redelivered(h: Harness) -> None:
    # given the commit of the final step succeeds but publishing the event fails
    h.start()
    h.deliver()
    h.deliver()
    final = h.next_payload()
    h.events.failures_left = 1
    with pytest.raises(ConnectionError):
        h.engine.run_task(final)  # the task fails, so Cloud Tasks delivers it again
    assert h.record().status is Status.SUCCEEDED
    assert h.events.published == []
    # when it is redelivered, the handler does not run again but the event goes out, once
    assert h.engine.run_task(final) is Ran.STALE
    assert h.engine.run_task(final) is Ran.STALE
    assert len(h.finish.calls) == 1
    assert [e["status"] for e in h.events.published] == ["SUCCEEDED"]


def test_the_commit_that_ends_a_flow_marks_its_result_sent_in_the_same_write(h: Harness) -> None:
    h.start()
    h.deliver()
    h.deliver()
    writes = h.store.writes
    assert h.deliver() is Ran.ADVANCED  # the final action: claim, commit, publish
    assert h.store.writes - writes == 2  # claim and commit; no third write to mark
    assert h.record().result_published is True
    assert [e["status"] for e in h.events.published] == ["SUCCEEDED"]


def test_a_result_lost_with_its_process_goes_out_when_cloud_tasks_retries_the_task(
    h: Harness,
) -> None:
    # given the final commit lands (marking the result sent) but neither the event nor the
    # unmark gets out, as when the process dies right after the commit
    h.start()
    h.deliver()
    h.deliver()
    final = h.next_payload()
    h.events.failures_left = 1
    real_change = h.store.change

    def down(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("firestore unavailable")

    h.store.change = down  # type: ignore[method-assign]
    with pytest.raises(ConnectionError):
        h.engine.run_task(final)
    h.store.change = real_change  # type: ignore[method-assign]
    assert h.record().result_published is True and h.events.published == []
    # when a duplicate of the first delivery arrives, it publishes nothing (not a retry) ...
    assert h.engine.run_task(final) is Ran.STALE
    assert h.events.published == []
    # ... and when Cloud Tasks retries the failed delivery, the event goes out
    assert h.engine.run_task(final, redelivery=True) is Ran.STALE
    assert len(h.finish.calls) == 1
    assert [e["status"] for e in h.events.published] == ["SUCCEEDED"]


def test_a_retried_delivery_of_a_task_that_did_not_end_the_flow_publishes_nothing(
    h: Harness,
) -> None:
    h.start()
    first = h.next_payload()
    assert h.engine.run_task(first) is Ran.ADVANCED
    h.deliver()
    h.deliver()
    published = list(h.events.published)
    assert h.engine.run_task(first, redelivery=True) is Ran.STALE
    assert h.events.published == published


def test_a_cancel_while_an_action_runs_is_refused_until_it_commits(h: Harness) -> None:
    # given an operator tries to cancel while the first handler (a side effect) is running
    refused: list[str] = []

    def cancel_meanwhile(ctx: StepContext) -> dict[str, Any]:
        with pytest.raises(InvalidTransition) as caught:
            h.engine.cancel(ctx.flow_id, "operator")
        refused.append(str(caught.value))
        return {"reservation": "r-1"}

    h.reserve.script = [cancel_meanwhile]
    h.start()
    # when the handler returns, its outcome commits; the cancel had been refused
    assert h.deliver() is Ran.ADVANCED
    assert "'reserve' is running" in refused[0]
    # and a cancel now undoes the reservation and ends the flow CANCELLED
    h.engine.cancel("1001", "operator")
    outcomes = {h.engine.run_task(h.queue.take(task_id)) for task_id in list(h.queue.tasks)}
    assert outcomes == {Ran.STALE, Ran.ADVANCED}  # the poll queued before, the compensation
    assert h.record().status is Status.CANCELLED
    assert len(h.release.calls) == 1


def test_a_flow_cancelled_while_a_poll_runs_keeps_the_cancellation(h: Harness) -> None:
    # given an operator cancels the flow while a poll (which only reads) is running
    def cancel_meanwhile(ctx: StepContext) -> dict[str, Any]:
        h.engine.cancel(ctx.flow_id, "operator")
        return {"state": "READY"}

    h.await_ready.script = [cancel_meanwhile]
    h.start()
    h.deliver()  # reserve
    # when the poll returns, its outcome is not committed over the cancellation
    assert h.deliver() is Ran.STALE
    record = h.record()
    assert record.status is Status.COMPENSATING
    assert "await_ready" not in record.outputs
    h.deliver()  # the compensation of reserve
    assert h.record().status is Status.CANCELLED
    assert [e["status"] for e in h.events.published] == ["CANCELLED"]


# -- operations -------------------------------------------------------------------------------


def test_cancel_ends_the_flow_and_its_pending_task_becomes_stale(h: Harness) -> None:
    h.start()
    cancelled = h.engine.cancel("1001", "no longer needed")
    assert cancelled.status is Status.CANCELLED
    assert [e["message"] for e in h.events.published] == ["no longer needed"]
    assert h.deliver() is Ran.STALE
    assert h.reserve.calls == []
    with pytest.raises(InvalidTransition):
        h.engine.cancel("1001")


def test_retry_runs_a_failed_flow_again_as_a_new_generation(h: Harness) -> None:
    h.reserve.script = [PermanentError("nope"), {"reservation": "r-2"}]
    h.start()
    h.deliver()
    assert h.record().status is Status.FAILED
    again = h.engine.retry("1001")
    assert again.status is Status.PENDING
    assert again.position.generation == 1
    assert h.queue.only().next == again.next
    assert h.deliver() is Ran.ADVANCED
    # the first call was refused: the new generation calls again under a fresh key
    assert h.reserve.calls[-1].idempotency_key == f"relayflow-1001-{INCARNATION}-reserve-e1"


def test_operating_on_a_missing_flow_is_flow_not_found(h: Harness) -> None:
    with pytest.raises(FlowNotFound):
        h.engine.cancel("nobody")
    with pytest.raises(FlowNotFound):
        h.engine.get("nobody")


# -- sweep ------------------------------------------------------------------------------------


def test_sweep_rescues_a_lost_task_and_leaves_a_queued_one(h: Harness) -> None:
    # given two flows due now, one of whose tasks has vanished from the queue
    h.start(message_id="lost")
    h.start(message_id="kept")
    lost, kept = h.record("lost"), h.record("kept")
    assert lost.next is not None and kept.next is not None
    h.queue.lose(lost.next.task_id)
    kept_doc = dict(h.store.docs["kept"])
    # when the sweeper runs two minutes later with a one-minute grace
    h.clock.advance(120)
    report = h.engine.sweep(grace_s=60)
    # then the lost one is re-enqueued under a new name, due now; the queued one keeps its
    # task and is set aside (the sweep's view of when it is due moves on), so it does not
    # head the next sweep's query
    assert (report.overdue, report.rescued, report.still_queued) == (2, 1, 1)
    rescued = h.record("lost")
    assert rescued.position.rescue == 1
    assert rescued.next is not None
    assert rescued.next.task_id != lost.next.task_id
    assert rescued.next.run_at == h.clock.now()
    assert h.queue.exists(rescued.next)
    set_aside = h.store.docs["kept"]
    assert set_aside["next_run_at"] == h.clock.now() + timedelta(minutes=10)
    unchanged = {"next_run_at": kept_doc["next_run_at"], "aside_until": None}
    assert {**set_aside, **unchanged} == kept_doc
    # and the rescued task runs the step
    assert h.deliver("lost") is Ran.ADVANCED
    assert len(h.reserve.calls) == 1


def test_sweep_ignores_flows_within_the_grace_period(h: Harness) -> None:
    h.start()
    record = h.record()
    assert record.next is not None
    h.queue.lose(record.next.task_id)
    h.clock.advance(30)
    report = h.engine.sweep(grace_s=60)
    assert (report.overdue, report.rescued) == (0, 0)


# -- what a handler returns, and definitions that changed ---------------------------------------


@pytest.mark.parametrize(
    ("output", "says"),
    [
        (["not", "a", "dict"], "output of reserve is a list"),
        ({"when": datetime(2026, 1, 1)}, "output of reserve.when is a datetime"),
        ({"n": 2**70}, "output of reserve.n is an integer outside 64 bits"),
        ({"__name__": 1}, "reserved key '__name__'"),
        ({"x": float("nan")}, "output of reserve.x is nan"),
        ({"blob": "x" * 300_000}, "the limit is 262144"),
    ],
)
def test_an_output_the_flow_document_cannot_hold_fails_the_flow_once(
    h: Harness, output: Any, says: str
) -> None:
    # given a step handler whose output Firestore could not store
    h.reserve.script = [lambda ctx: output]
    h.start()
    # when its task runs, then the flow FAILS at once with the reason (no retry, no 5xx loop)
    assert h.deliver() is Ran.ADVANCED
    record = h.record()
    assert record.status is Status.FAILED
    assert record.result is not None and record.result.code == "INVALID_OUTPUT"
    assert says in record.result.message
    assert len(h.reserve.calls) == 1


def test_a_task_for_a_flow_this_service_does_not_know_is_retried(h: Harness) -> None:
    # given a flow started by a newer deployment, whose definition this instance lacks
    h.start()
    h.store.docs["1001"]["flow"] = "from-the-future"
    # when its task arrives, then it raises (a 5xx), so Cloud Tasks delivers it again later
    with pytest.raises(UnknownFlow):
        h.deliver()
    assert h.reserve.calls == []


def test_a_position_the_definition_no_longer_has_ends_the_flow(h: Harness) -> None:
    # given a flow whose current step was renamed by a deploy while it waited
    h.start()
    h.store.docs["1001"]["tracks"]["reserve"]["position"]["step"] = "reserve_v0"
    renamed = h.record().position
    # when its task runs, then the flow FAILS as DEFINITION_CHANGED instead of crashing forever
    assert h.engine.run_task(TaskPayload(flow_id="1001", position=renamed)) is Ran.ADVANCED
    record = h.record()
    assert record.status is Status.FAILED
    assert record.result is not None and record.result.code == "DEFINITION_CHANGED"
    assert h.reserve.calls == []


def test_sweep_publishes_a_result_that_never_went_out_and_sets_aside_an_unknown_type(
    h: Harness,
) -> None:
    # given a flow that ended while Pub/Sub was down (its event never went out) ...
    h.reserve.script = [PermanentError("no", code="NOPE")]
    h.start()
    h.events.failures_left = 1
    with pytest.raises(ConnectionError):
        h.deliver()
    assert h.record().result_published is False
    # ... and a flow whose definition is gone, overdue
    h.start(message_id="orphan")
    h.store.docs["orphan"]["flow"] = "gone"
    h.queue.lose(h.record("orphan").next.task_id)  # type: ignore[union-attr]
    # when the sweeper runs later
    h.clock.advance(600)
    report = h.engine.sweep(grace_s=60)
    # then the missing event is published once, and the flow of an unknown type is set aside
    # (a rolling deploy may still bring its type back)
    assert (report.errors, report.unpublished, report.republished) == (0, 1, 1)
    assert h.store.docs["orphan"]["next_run_at"] == h.clock.now() + timedelta(minutes=10)
    assert [e["code"] for e in h.events.published] == ["NOPE"]
    assert h.record().result_published is True


def test_a_retry_publishes_the_ended_generation_first_and_then_its_own(h: Harness) -> None:
    # given generation 0 failed and an operator retried it before its mark landed
    h.reserve.script = [PermanentError("no"), {"reservation": "r-2"}]
    h.start()
    h.events.failures_left = 1
    with pytest.raises(ConnectionError):
        h.deliver()  # generation 0 FAILED, its event not yet out
    h.engine.retry("1001")  # publishes generation 0's event, then starts generation 1
    assert h.store.mark_published("1001", generation=0) is False
    # when generation 1 runs to the end
    h.await_ready.script = [{"state": "READY"}]
    while h.record().status not in {Status.SUCCEEDED, Status.FAILED}:
        h.deliver()
    # then both generations' events went out, in order
    assert [e["generation"] for e in h.events.published] == [0, 1]


# -- claims: one delivery at a time runs a side effect ------------------------------------------


def test_a_second_delivery_while_the_first_runs_is_busy_and_calls_nothing(h: Harness) -> None:
    # given the first delivery of ``reserve`` is inside its handler (holding the claim) ...
    h.start()
    payload = h.next_payload()
    seen: list[Ran] = []

    def reserve_while_a_duplicate_arrives(ctx: StepContext) -> dict[str, Any]:
        seen.append(h.engine.run_task(payload))  # ... when the duplicate is delivered
        return {"reservation": "r-1"}

    h.reserve.script = [reserve_while_a_duplicate_arrives]
    first = h.engine.run_task(payload)
    # then the duplicate was told to come back (409) without calling the API; the first commits
    assert seen == [Ran.BUSY]
    assert first is Ran.ADVANCED
    assert len(h.reserve.calls) == 1
    assert h.record().claim is None  # a commit releases the claim
    # and when the duplicate comes back later it is stale
    assert h.engine.run_task(payload) is Ran.STALE


def test_a_claim_left_by_a_delivery_that_died_expires(h: Harness) -> None:
    # given a delivery claimed ``reserve`` and died before committing
    h.start()
    payload = h.next_payload()
    h.reserve.script = [_die]
    with pytest.raises(SystemExit):
        h.engine.run_task(payload)
    assert h.record().claim is not None
    # when Cloud Tasks retries within the lease, it is busy; after the lease, it runs
    h.reserve.script = [{"reservation": "r-1"}]
    assert h.engine.run_task(payload) is Ran.BUSY
    h.clock.advance(151)
    assert h.engine.run_task(payload) is Ran.ADVANCED
    assert len(h.reserve.calls) == 2


def test_a_poll_claims_nothing_because_reading_has_no_side_effect(h: Harness) -> None:
    h.start()
    h.deliver()  # reserve
    claims: list[object] = []
    h.await_ready.script = [lambda ctx: claims.append(h.record().claim) or {"state": "READY"}]
    h.deliver()
    assert claims == [None]


def _die(ctx: StepContext) -> dict[str, Any]:
    raise SystemExit("killed mid-handler")  # not an Exception: nothing in the engine catches it

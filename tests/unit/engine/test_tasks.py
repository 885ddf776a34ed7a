"""engine against in-memory ports: running tasks (position checks, outcomes, one result event
per flow)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from relayflow.core.engine import Ran
from relayflow.core.errors import (
    InvalidTransition,
    NotReady,
    PermanentError,
    RetryableError,
)
from relayflow.core.flows import (
    StepContext,
)
from relayflow.core.ports import Enqueued
from relayflow.core.position import TaskKind, TaskPayload
from relayflow.core.state import Status

from .support import INCARNATION, NOW, POLL, Harness


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

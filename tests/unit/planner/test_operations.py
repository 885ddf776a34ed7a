"""relayflow.core.planner.operations: an operator cancels an active flow or restarts an ended one.

The flow under test is ``tests.unit.planner.sample``'s (see there).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from relayflow.core import planner
from relayflow.core.errors import InvalidTransition, PermanentError
from relayflow.core.planner import Completed, Failed
from relayflow.core.position import Position, TaskKind, task_id
from relayflow.core.records import FlowRecord
from relayflow.core.state import Status
from tests.unit.planner.sample import FLOW_ID, NOW, at_finish, at_poll, make_flow, plan, started


def test_cancel_compensates_completed_steps_then_ends_cancelled() -> None:
    # given a flow polling after ``reserve`` (which can be undone) completed
    cancelling = planner.cancel(plan(), at_poll(), "operator said so")
    assert cancelling.status is Status.COMPENSATING
    assert (cancelling.position.step, cancelling.position.kind) == ("reserve", TaskKind.COMPENSATE)
    # when the compensation succeeds, then the flow ends CANCELLED
    cancelled = planner.after(plan(), cancelling, Completed({}))
    assert cancelled.status is Status.CANCELLED
    assert cancelled.result is not None and cancelled.result.code == "CANCELLED"


def test_a_compensating_flow_cannot_be_cancelled() -> None:
    cancelling = planner.cancel(plan(), at_poll(), "first")
    with pytest.raises(InvalidTransition, match="compensating"):
        planner.cancel(plan(), cancelling, "second")


@pytest.mark.parametrize("record", [started()], ids=["pending"])
def test_cancel_ends_an_active_flow_as_cancelled(record: FlowRecord) -> None:
    cancelled = planner.cancel(plan(), record, "operator said so")
    assert cancelled.status is Status.CANCELLED
    assert cancelled.result is not None
    assert cancelled.result.code == "CANCELLED"
    assert cancelled.result.message == "operator said so"
    assert cancelled.next is None
    assert cancelled.history[-1].outcome == "cancelled"


def test_cancel_refuses_a_flow_that_has_ended() -> None:
    done = planner.after(plan(), at_finish(), Completed({}))
    with pytest.raises(InvalidTransition):
        planner.cancel(plan(), done, "too late")


def test_restart_resumes_a_failed_flow_at_the_failed_step_as_a_new_generation() -> None:
    flow = make_flow(compensate=False)
    failed = planner.after(plan(flow=flow), at_poll(flow=flow), Failed(PermanentError("no")))
    later = NOW + timedelta(hours=1)
    again = planner.restart(plan(later, flow=flow), failed)
    assert again.status is Status.PENDING
    assert again.position == Position(
        generation=1, step_index=1, step="await_ready", kind=TaskKind.POLL
    )
    assert again.outputs == {"reserve": {"reservation": "r-1"}}
    assert (again.result, again.finished_at, again.result_published) == (None, None, False)
    assert again.step_started_at == later
    assert again.next is not None
    assert again.next.run_at == later
    assert again.next.task_id != task_id(FLOW_ID, failed.position)


def test_restart_after_compensation_starts_over_without_outputs() -> None:
    compensating = planner.after(plan(), at_finish(), Failed(PermanentError("no")))
    failed = planner.after(plan(), compensating, Completed({}))
    again = planner.restart(plan(), failed)
    assert again.position == Position(
        generation=1, step_index=0, step="reserve", kind=TaskKind.ACTION
    )
    assert again.outputs == {}


def test_restart_after_an_earlier_generation_compensated_keeps_this_generations_outputs() -> None:
    # given generation 0 failed and was compensated, and generation 1 redid ``reserve`` and
    # then failed at await_ready with its compensation failing (so r-2 was not undone)
    compensating = planner.after(plan(), at_finish(), Failed(PermanentError("no")))
    gen1 = planner.restart(plan(), planner.after(plan(), compensating, Completed({})))
    gen1 = planner.after(plan(), gen1, Completed({"reservation": "r-2"}))
    gen1 = planner.after(plan(), gen1, Failed(PermanentError("broken")))
    gen1 = planner.after(plan(), gen1, Failed(PermanentError("cannot undo")))
    assert gen1.status is Status.FAILED
    # when it is restarted
    again = planner.restart(plan(), gen1)
    # then generation 0's compensation does not make it start over and drop r-2
    assert again.position.generation == 2
    assert again.outputs["reserve"] == {"reservation": "r-2"}


@pytest.mark.parametrize(
    "record",
    [started(), at_poll(), planner.after(plan(), at_finish(), Completed({}))],
    ids=["pending", "running", "succeeded"],
)
def test_restart_refuses_a_flow_that_has_not_failed(record: FlowRecord) -> None:
    with pytest.raises(InvalidTransition):
        planner.restart(plan(), record)


def test_cancel_waits_for_a_running_step_to_commit() -> None:
    # given a delivery holds the claim on the current step
    claimed = planner.claim(plan(), at_poll(), lease_s=60, holder="delivery-1")
    # when an operator cancels, then it is refused until the step commits (or the lease ends)
    with pytest.raises(InvalidTransition, match="is running"):
        planner.cancel(plan(), claimed, "stop")
    later = plan(NOW + timedelta(seconds=61))
    assert planner.cancel(later, claimed, "stop").status is Status.COMPENSATING

"""relayflow.core.planner.forward: a step done advances the flow; an ended flow plans nothing more.

The flow under test is ``tests.unit.planner.sample``'s (see there).
"""

from __future__ import annotations

import pytest

from relayflow.core import planner
from relayflow.core.errors import InvalidTransition, PermanentError
from relayflow.core.flows import ActionStep, Flow
from relayflow.core.planner import Completed, Failed
from relayflow.core.position import Position, TaskKind, task_id
from relayflow.core.state import Status
from tests.unit.planner.sample import FLOW_ID, NOW, at_finish, noop, plan, started


def test_success_advances_to_the_next_step_due_now_on_its_queue() -> None:
    # given a new flow, when its first action succeeds
    record = planner.after(plan(), started(), Completed({"reservation": "r-1"}))
    # then it runs, at the poll step, whose first poll is due now on the polls queue
    assert record.status is Status.RUNNING
    assert record.position == Position(step_index=1, step="await_ready", kind=TaskKind.POLL)
    assert record.outputs == {"reserve": {"reservation": "r-1"}}
    assert record.next is not None
    assert (record.next.queue, record.next.run_at) == ("q-polls", NOW)
    assert record.next.task_id == task_id(FLOW_ID, record.position)
    assert record.step_started_at == NOW
    assert record.history[-1].outcome == "succeeded"


def test_a_ready_poll_advances_to_the_next_action_on_the_steps_queue() -> None:
    record = at_finish()
    assert record.position.step == "finish"
    assert record.position.kind is TaskKind.ACTION
    assert record.next is not None and record.next.queue == "q-steps"
    assert record.history[-1].outcome == "ready"


def test_success_of_the_last_step_succeeds_the_flow_with_its_final_output() -> None:
    done = planner.after(plan(), at_finish(), Completed({"entity": "e-1"}))
    assert done.status is Status.SUCCEEDED
    assert done.result is not None
    assert done.result.status is Status.SUCCEEDED
    assert done.result.code == "OK"
    assert done.result.data == {"entity": "e-1"}
    assert done.outputs == {
        "reserve": {"reservation": "r-1"},
        "await_ready": {"state": "READY"},
        "finish": {"entity": "e-1"},
    }
    assert done.result.error is None
    assert (done.next, done.next_run_at, done.finished_at) == (None, None, NOW)


def test_a_one_step_flow_goes_from_pending_to_succeeded() -> None:
    flow = Flow(name="single", steps=(ActionStep("only", noop),))
    done = planner.after(plan(flow=flow), started(flow=flow), Completed({"x": 1}))
    assert done.status is Status.SUCCEEDED


def test_planning_on_a_terminal_record_is_refused() -> None:
    failed = planner.after(plan(), started(), Failed(PermanentError("no")))
    with pytest.raises(InvalidTransition):
        planner.after(plan(), failed, Completed({}))

"""relayflow.core.planner.starts: a new flow, pending at its first steps.

The flow under test is ``tests.unit.planner.sample``'s (see there).
"""

from __future__ import annotations

from datetime import timedelta

from relayflow.core.position import Position, TaskKind, task_id
from relayflow.core.state import Status
from tests.unit.planner.sample import FLOW_ID, NOW, started


def test_a_new_flow_is_pending_at_its_first_step_with_its_first_task_due_now() -> None:
    record = started()
    assert record.status is Status.PENDING
    assert record.position == Position(step_index=0, step="reserve", kind=TaskKind.ACTION)
    assert record.next is not None
    assert record.next.queue == "q-steps"
    assert record.next.run_at == NOW
    assert record.next.position == record.position
    assert record.next.task_id == task_id(FLOW_ID, record.position)
    assert record.next_run_at == NOW
    assert record.deadline_at is None
    assert (record.message_id, record.input) == ("m-1", {"resource": "acme-1"})
    assert record.history == []


def test_a_new_flow_with_a_deadline_records_when_it_ends() -> None:
    assert started(deadline_s=60).deadline_at == NOW + timedelta(seconds=60)

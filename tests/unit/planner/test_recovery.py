"""relayflow.core.planner.recovery: a lost task is rescued under a new name.

The flow under test is ``tests.unit.planner.sample``'s (see there).
"""

from __future__ import annotations

from datetime import timedelta

from relayflow.core import planner
from tests.unit.planner.sample import at_poll, not_ready, plan


def test_rescue_replaces_a_lost_task_under_a_new_name_due_now() -> None:
    polling = planner.after(plan(), at_poll(), not_ready())
    assert polling.next is not None
    later = polling.next.run_at + timedelta(minutes=5)
    rescued = planner.rescue(plan(later), polling)
    assert rescued.status is polling.status
    assert rescued.position == polling.position.model_copy(update={"rescue": 1})
    assert rescued.next is not None
    assert rescued.next.run_at == later
    assert rescued.next.task_id != polling.next.task_id
    assert rescued.history[-1].outcome == "rescued"
    assert (rescued.polls, rescued.attempts) == (polling.polls, polling.attempts)

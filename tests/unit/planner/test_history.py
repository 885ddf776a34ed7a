"""relayflow.core.planner.history: a bounded history.

The flow under test is ``tests.unit.planner.sample``'s (see there).
"""

from __future__ import annotations

from relayflow.core import planner
from tests.unit.planner.sample import NOW, at_poll, not_ready, plan


def test_history_is_bounded_and_counts_what_it_dropped() -> None:
    # given a history limit of 3
    record, now = at_poll(), NOW
    # when the flow logs 1 success and 4 polls (5 entries)
    for _ in range(4):
        record = planner.after(plan(now, history_limit=3), record, not_ready())
        assert record.next is not None
        now = record.next.run_at
    # then the 3 newest are kept and 2 are counted as dropped
    assert [h.poll for h in record.history] == [1, 2, 3]
    assert record.history_dropped == 2
    assert record.polls == 4

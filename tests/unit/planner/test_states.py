"""relayflow.core.planner.states: a finished flow expires after the retention period.

The flow under test is ``tests.unit.planner.sample``'s (see there).
"""

from __future__ import annotations

from datetime import timedelta

from relayflow.core import planner
from relayflow.core.kinds import REGISTRY
from relayflow.core.planner import Completed, Plan, QueueNames
from tests.unit.planner.sample import FLOW, NOW, at_finish


def test_a_finished_flow_expires_after_the_retention_period() -> None:
    # given a flow at its last step, and a plan that keeps finished flows for one day
    record = at_finish()
    one_day = Plan(
        definition=FLOW, queues=QueueNames(), now=NOW, kinds=REGISTRY, retention_s=86400.0
    )

    # when the last step succeeds, then the doc carries the TTL field Terraform's policy reads
    done = planner.after(one_day, record, Completed({"ok": True}))
    assert done.expire_at == NOW + timedelta(days=1)
    assert record.expire_at is None  # an active flow never expires

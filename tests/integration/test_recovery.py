"""relayflow.gcp.store.recovery against the Firestore emulator: the sweeper's overdue query."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from relayflow.core.state import Status
from relayflow.gcp.store import FlowStore

from .support import make_record

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_overdue_finds_only_active_flows_due_before_the_cutoff(flow_store: FlowStore) -> None:
    cutoff = T0
    early, late = T0 - timedelta(minutes=5), T0 + timedelta(minutes=5)
    for flow_id, status, next_run_at in [
        ("pending-overdue", Status.PENDING, early),
        ("running-overdue", Status.RUNNING, early),
        ("compensating-overdue", Status.COMPENSATING, early),
        ("running-due-at-cutoff", Status.RUNNING, cutoff),
        ("running-not-yet", Status.RUNNING, late),
        ("running-no-next", Status.RUNNING, None),
        ("succeeded-old-next", Status.SUCCEEDED, early),
        ("failed-old-next", Status.FAILED, early),
    ]:
        flow_store.create(make_record(flow_id, status=status, next_run_at=next_run_at))

    overdue = flow_store.overdue(cutoff=cutoff)

    assert sorted(r.flow_id for r in overdue) == [
        "compensating-overdue",
        "pending-overdue",
        "running-overdue",
    ]
    assert len(flow_store.overdue(cutoff=cutoff, limit=2)) == 2

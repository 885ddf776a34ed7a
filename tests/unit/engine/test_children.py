"""The engine's side of child flows (``core.engine.children``): a child is created once
whatever is delivered twice, and a start whose commit landed before its process died still
creates the child it noted."""

from __future__ import annotations

from relayflow.core.engine import Ran
from relayflow.core.position import Position, TaskKind, TaskPayload
from relayflow.core.state import Status
from relayflow.testing import Harness
from tests.unit.kinds.test_child import order, payment


def test_duplicate_deliveries_start_one_child() -> None:
    h = Harness([order(), payment()], duplicate_deliveries=True)
    fid = h.start("order", {"total": 3}, flow_id="o-7")
    record = h.run(fid)
    assert record is not None and record.status is Status.SUCCEEDED
    children = [r for r in h.store.docs if r.startswith("o-7-")]
    assert children == ["o-7-charge-g0a0"]
    assert h.calls_of("capture") and len(h.calls_of("capture")) == 1


def test_a_redelivered_start_whose_commit_landed_creates_the_child_it_noted() -> None:
    # given a parent that noted its child, whose process died before the child was created
    h = Harness([order(), payment()])
    fid = h.start("order", {"total": 2}, flow_id="o-9")
    child_key = "o-9-charge-g0a0"
    while child_key not in h.store.docs:
        h.deliver_next()
    assert h.flow(fid).tracks["charge"].child == child_key
    del h.store.docs[child_key]
    # when Cloud Tasks delivers the start task again (it was never answered)
    start = TaskPayload(
        flow_id=fid, position=Position(step_index=1, step="charge", kind=TaskKind.CHILD)
    )
    assert h.deliver(start, redelivery=True) is Ran.STALE
    # then the child exists, and its end wakes the parent
    assert h.flow(child_key).child_of is not None
    record = h.run(fid)
    assert record is not None and record.status is Status.SUCCEEDED
    assert record.outputs["charge"] == {"done": "capture", "amount": 2}

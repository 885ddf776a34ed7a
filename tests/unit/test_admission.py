"""relayflow.core.admission: a limited tenant's starts wait for a slot and are admitted in order
as slots free up, never more running than its quota; a start rate spaces admissions; a freed
slot goes straight to the oldest waiting flow. Through relayflow.testing's harness, with the
tenant's job flow of ``tests/unit/test_tenants.py``."""

from __future__ import annotations

from datetime import timedelta

from relayflow import ActionStep, Flow
from relayflow.core.state import ACTIVE, Status
from relayflow.testing import Harness, scripted
from tests.unit.test_tenants import flow, policy


def running(h: Harness, tenant: str) -> int:
    return sum(
        1
        for doc in h.store.docs.values()
        if doc.get("tenant") == tenant
        and doc["admission"] == "admitted"
        and doc["status"] in ACTIVE
    )


def test_starts_over_the_quota_wait_and_are_admitted_in_order_as_room_frees_up() -> None:
    h = Harness(flow(), tenants=policy(max_running=2))
    ids = [h.start("job", flow_id=f"a{i}", tenant="acme") for i in range(5)]
    assert [h.flow(i).admission for i in ids] == ["admitted"] * 2 + ["waiting"] * 3
    assert not h.flow("a2").tracks  # a waiting flow holds no task
    admitted_at: dict[str, int] = {}
    most = 0
    step = 0
    while h.queue.due_first() is not None:
        h.deliver_next()
        step += 1
        most = max(most, running(h, "acme"))
        for i in ids:
            if i not in admitted_at and h.flow(i).admission == "admitted":
                admitted_at[i] = step
    assert most == 2  # the quota, never exceeded
    assert sorted(admitted_at, key=lambda i: admitted_at[i]) == ids  # in the order they came
    assert all(h.flow(i).status is Status.SUCCEEDED for i in ids)
    assert all(doc["holder"] is None for doc in h.store.slots.values())  # every slot back


def test_other_tenants_are_not_held_up_by_a_limited_one() -> None:
    h = Harness(flow(), tenants=policy(max_running=1))
    for i in range(3):
        h.start("job", flow_id=f"a{i}", tenant="acme")
    b = h.start("job", flow_id="b0", tenant="beta")  # no policy: no limit
    assert h.flow(b).admission == "admitted" and h.flow(b).tracks
    assert h.run(b) is not None and h.flow(b).status is Status.SUCCEEDED


def test_a_start_rate_spaces_admissions() -> None:
    # 2 slots, 1 start a second: each slot rests 2 s after it is taken, so the third and
    # fourth starts are admitted 2 s in, though the first two ended at once
    quick = Flow(name="job", steps=(ActionStep("only", scripted({"ok": True})),))
    h = Harness(quick, tenants=policy(max_running=2, starts_per_s=1.0))
    t0 = h.now
    ids = [h.start("job", flow_id=f"a{i}", tenant="acme") for i in range(4)]
    h.run()
    admitted = [next(e.at for e in h.flow(i).history if e.outcome == "admitted") - t0 for i in ids]
    assert admitted == [timedelta(0), timedelta(0), timedelta(seconds=2), timedelta(seconds=2)]
    assert all(h.flow(i).status is Status.SUCCEEDED for i in ids)


def test_a_cancelled_waiting_flow_is_skipped_and_frees_nothing() -> None:
    h = Harness(flow(), tenants=policy(max_running=1))
    first = h.start("job", flow_id="a0", tenant="acme")
    second = h.start("job", flow_id="a1", tenant="acme")
    third = h.start("job", flow_id="a2", tenant="acme")
    assert h.cancel(second).status is Status.CANCELLED
    h.run(first)
    assert h.flow(third).admission == "admitted"
    record = h.run(third)
    assert record is not None and record.status is Status.SUCCEEDED


def test_a_freed_slot_is_handed_straight_to_the_oldest_waiting_flow() -> None:
    h = Harness(flow(), tenants=policy(max_running=1))
    first = h.start("job", flow_id="a0", tenant="acme")
    h.start("job", flow_id="a1", tenant="acme")
    writes_before = h.store.slot_writes
    h.run(first)
    nxt = h.flow("a1")
    assert nxt.admission == "admitted" and nxt.slot == h.flow(first).slot
    assert h.store.slot_writes - writes_before == 1  # one hand-over, no release and take
    assert h.store.slots[nxt.slot]["holder"] == nxt.key  # the flow's key: acme~a1
    h.engine._kernel.settle(h.flow(first))  # settling the ended flow again passes nothing on
    assert h.store.slots[nxt.slot]["holder"] == nxt.key


def test_a_slot_beyond_a_lowered_quota_is_given_back_not_handed_on() -> None:
    # given two flows holding acme's two slots and two waiting ...
    h = Harness(flow(), tenants=policy(max_running=2))
    ids = [h.start("job", flow_id=f"a{i}", tenant="acme") for i in range(4)]
    assert [h.flow(i).slot for i in ids] == ["acme.0", "acme.1", None, None]
    # ... when a deployment lowers the quota to one and both running flows end
    h.tenants = policy(max_running=1)
    h.deploy(flow())
    h.run(ids[0])
    h.run(ids[1])
    # then only slot 0 is handed on: one flow runs, as the new quota says
    assert h.store.slots["acme.1"]["holder"] is None
    assert [h.flow(i).admission for i in ids[2:]] == ["admitted", "waiting"]
    assert running(h, "acme") == 1

"""Tenants: a limited tenant's starts wait for a slot and are admitted in order as slots free
up, never more running than its quota; a start rate spaces admissions; pausing puts a
tenant's tasks off without spending attempts, resuming goes on where they were; high priority
takes its own queues. Through relayflow.testing's harness."""

from __future__ import annotations

from datetime import timedelta

from relayflow import ActionStep, Flow, NotReady, PollPolicy, PollStep, StepContext
from relayflow.core.state import ACTIVE, Status
from relayflow.core.tenants import TenantPolicy, Tenants
from relayflow.testing import Harness, scripted

POLL = PollPolicy(initial_s=10.0, multiplier=1.0, max_interval_s=10.0, jitter=0.0)


def ready_after_three(ctx: StepContext) -> dict[str, bool]:
    if ctx.poll < 2:
        raise NotReady("not yet")
    return {"ready": True}


def flow() -> Flow:
    return Flow(
        name="job",
        steps=(
            ActionStep("begin", scripted({"ok": True})),
            PollStep("wait", ready_after_three, policy=POLL),
        ),
    )


def policy(**kw: object) -> Tenants:
    return Tenants(tenants={"acme": TenantPolicy(**kw)})  # type: ignore[arg-type]


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


def test_pausing_a_tenant_puts_its_tasks_off_and_resuming_goes_on_where_they_were() -> None:
    h = Harness(flow())
    flow_id = h.start("job", tenant="acme")
    h.deliver_next()  # begin: done
    h.deliver_next()  # the first poll
    polls_before = len(h.calls_of("wait"))
    h.engine.pause_tenant("acme", by="ops@example.com", reason="maintenance")
    for _ in range(5):  # five deliveries while paused: each is put off, none runs
        h.deliver_next()
    record = h.flow(flow_id)
    assert len(h.calls_of("wait")) == polls_before
    assert [e.outcome for e in record.history[-5:]] == ["deferred"] * 5
    assert record.position.attempt == 0 and record.polls == polls_before
    h.engine.resume_tenant("acme", by="ops@example.com")
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED
    assert record.polls == 3  # went on where it was: no poll repeated, none lost


def test_every_flow_and_event_carries_its_tenant_and_high_priority_takes_its_own_queues() -> None:
    from relayflow.core.planner import QueueNames

    tenants = Tenants(tenants={"acme": TenantPolicy(priority="high")})
    h = Harness(flow(), tenants=tenants)
    h.engine._kernel.queues = QueueNames(steps_high="flow-steps-high", polls_high="flow-polls-high")
    urgent = h.start("job", tenant="acme")
    normal = h.start("job", tenant="acme", priority="low")  # a message may ask for less
    assert h.flow(urgent).tenant == "acme" and h.flow(urgent).priority == "high"
    assert h.flow(urgent).next is not None and h.flow(urgent).next.queue == "flow-steps-high"
    assert h.flow(normal).next is not None and h.flow(normal).next.queue == "flow-steps"
    h.run()
    assert {e["tenant"] for e in h.results()} == {"acme"}


def test_a_message_cannot_raise_its_priority_above_its_tenants_policy() -> None:
    from relayflow.core.planner import QueueNames

    h = Harness(flow(), tenants=Tenants(tenants={"acme": TenantPolicy(priority="low")}))
    h.engine._kernel.queues = QueueNames(steps_high="flow-steps-high", polls_high="flow-polls-high")
    pushy = h.start("job", tenant="acme", priority="high")
    assert h.flow(pushy).priority == "low"
    assert h.flow(pushy).next is not None and h.flow(pushy).next.queue == "flow-steps"


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


def test_metric_labels_name_configured_tenants_only() -> None:
    tenants = policy(max_running=1)
    assert [tenants.label(t) for t in ("acme", "default", "made-up-7")] == [
        "acme",
        "default",
        "other",
    ]

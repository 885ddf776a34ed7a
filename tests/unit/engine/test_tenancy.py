"""relayflow.core.engine.tenancy: pausing a tenant puts its tasks off without spending attempts,
resuming goes on where they were and admits its waiting flows; operators see every tenant's
limits, state and counts. Through relayflow.testing's harness, with the tenant's job flow of
``tests/unit/test_tenants.py``."""

from __future__ import annotations

from datetime import timedelta

from relayflow.core.flows import Flow, ForEach
from relayflow.core.ports import TenantState
from relayflow.core.state import Status
from relayflow.core.tenants import TenantPolicy, Tenants
from relayflow.testing import Harness
from tests.unit.test_tenants import flow, policy


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


def test_resuming_brings_forward_what_the_pause_put_off() -> None:
    # given a tenant's flow whose poll a pause put off for 30 s
    h = Harness(flow())
    flow_id = h.start("job", tenant="acme")
    h.deliver_next()  # begin: done
    h.engine.pause_tenant("acme", by="ops", reason="maintenance")
    h.deliver_next()  # the first poll: put off
    put_off = h.flow(flow_id).next
    assert put_off is not None and put_off.run_at == h.now + timedelta(seconds=30)

    # when it is resumed, then that task runs now, not 30 s later
    resumed = h.engine.resume_tenant("acme", by="ops", reason="done")
    assert resumed.brought_forward == 1
    h.deliver_next()
    assert len(h.calls_of("wait")) == 1 and h.now < put_off.run_at


def test_resuming_brings_forward_the_put_off_items_of_a_foreach_too() -> None:
    # given a tenant's ForEach whose three lanes' tasks a pause put off
    each = ForEach("each", items=lambda ctx: [1, 2, 3], steps=flow().steps, concurrency=3)
    h = Harness(Flow(name="items", steps=(each,)))
    flow_id = h.start("items", tenant="acme")
    h.deliver_next(flow_id)  # the fan-out: the lanes exist, their first tasks due
    h.engine.pause_tenant("acme", by="ops", reason="maintenance")
    h.run_until(h.now + timedelta(seconds=5))
    lanes = [h.store.get(lane) for lane in h.flow(flow_id).lanes]
    assert len(lanes) == 3
    assert all(lane is not None and lane.next and lane.next.position.deferral for lane in lanes)

    # when it is resumed, then each lane's task runs now
    resumed = h.engine.resume_tenant("acme", by="ops", reason="done")
    assert resumed.brought_forward == 3
    before = h.now
    for _ in range(3):
        h.deliver_next()
    assert len(h.calls_of("begin")) == 3 and h.now == before


def test_a_put_off_task_that_comes_back_reads_the_tenants_state_afresh() -> None:
    # given a tenant's task put off by a pause, and a resume this process has not heard of
    # (another instance resumed it: its word here is still "paused", for a few seconds)
    h = Harness(flow())
    flow_id = h.start("job", tenant="acme")
    h.deliver_next()
    h.engine.pause_tenant("acme", by="ops", reason="maintenance")
    h.deliver_next()  # the first poll: put off
    h.store.set_tenant_state(TenantState("acme", paused=False, by="elsewhere", reason="done"))

    # when the task comes back (brought forward by that resume), then it runs
    h.deliver_next()
    assert len(h.calls_of("wait")) == 1
    assert [e.outcome for e in h.flow(flow_id).history].count("deferred") == 1


def test_a_pause_records_who_paused_the_tenant_and_why() -> None:
    h = Harness(flow())
    state = h.engine.pause_tenant("acme", by="ops@example.com", reason="maintenance")
    paused_at = h.now
    assert state == TenantState(
        "acme", paused=True, by="ops@example.com", reason="maintenance", at=paused_at
    )
    assert h.store.tenant_state("acme") == state
    h.advance(60)
    resumed = h.engine.resume_tenant("acme", by="lead@example.com", reason="done")
    resumed_at = paused_at + timedelta(seconds=60)
    assert resumed.state == TenantState(
        "acme", paused=False, by="lead@example.com", reason="done", at=resumed_at
    )
    assert resumed.brought_forward == 0  # it had no flows
    assert h.store.tenant_state("acme") == resumed.state


def test_resuming_a_tenant_admits_the_flows_that_waited_while_it_was_paused() -> None:
    # given a limited tenant, paused: its new flows wait, none is admitted
    h = Harness(flow(), tenants=policy(max_running=1))
    h.engine.pause_tenant("acme", by="ops", reason="maintenance")
    first = h.start("job", flow_id="a0", tenant="acme")
    second = h.start("job", flow_id="a1", tenant="acme")
    assert [h.flow(f).admission for f in (first, second)] == ["waiting", "waiting"]
    # when it is resumed, then the oldest waiting flow takes its one slot at once
    h.engine.resume_tenant("acme", by="ops", reason="done")
    assert [h.flow(f).admission for f in (first, second)] == ["admitted", "waiting"]
    assert h.run(second) is not None and h.flow(second).status is Status.SUCCEEDED


def test_views_show_every_tenant_with_a_policy_or_a_state_and_its_flows() -> None:
    # given acme (2 at a time) with three flows, beta paused by an operator, and one default flow
    tenants = Tenants(
        tenants={
            "acme": TenantPolicy(max_running=2, priority="high"),
            "gamma": TenantPolicy(paused=True),
        }
    )
    h = Harness(flow(), tenants=tenants)
    for i in range(3):
        h.start("job", flow_id=f"a{i}", tenant="acme")
    h.start("job", flow_id="d0")
    h.engine.pause_tenant("beta", by="ops", reason="unpaid")
    # then each is shown once, by name, with its limits, its state and its flows
    views = {view["tenant"]: view for view in h.engine.tenant_views()}
    assert sorted(views) == ["acme", "beta", "default", "gamma"]
    acme = views["acme"]
    assert (acme["max_running"], acme["priority"], acme["paused"]) == (2, "high", False)
    assert (acme["running"], acme["waiting"]) == (2, 1)
    beta = views["beta"]
    assert (beta["paused"], beta["paused_by"], beta["reason"]) == (True, "ops", "unpaid")
    assert (beta["since"], beta["configured_paused"]) == (h.now.isoformat(), False)
    assert (beta["running"], beta["waiting"], beta["max_running"]) == (0, 0, 0)
    assert (views["default"]["running"], views["default"]["waiting"]) == (1, 0)
    assert views["default"]["since"] is None  # never paused or resumed
    gamma = views["gamma"]  # paused in its policy: no operator did it, none can lift it
    assert (gamma["paused"], gamma["configured_paused"], gamma["paused_by"]) == (True, True, "")


def test_one_tenants_view_is_as_the_list_shows_it_and_none_for_an_unknown_tenant() -> None:
    h = Harness(flow(), tenants=Tenants(tenants={"acme": TenantPolicy(max_running=2)}))
    h.start("job", flow_id="a0", tenant="acme")
    h.engine.pause_tenant("beta", by="ops", reason="unpaid")  # no policy: known by its state
    listed = {view["tenant"]: view for view in h.engine.tenant_views()}
    for name in ("acme", "beta", "default"):
        assert h.engine.tenant_view(name) == listed[name]
    assert h.engine.tenant_view("nobody") is None

"""Changing a flow while flows run: each flow finishes on the version it started on while that
version is registered; new starts take the newest; a removed version ends DEFINITION_CHANGED,
its done steps undone by the newest version's compensations."""

from __future__ import annotations

from relayflow import ActionStep, Flow, NotReady, PollPolicy, PollStep, StepContext
from relayflow.core.state import Status
from relayflow.testing import Harness, scripted

POLL = PollPolicy(initial_s=10.0, multiplier=1.0, max_interval_s=10.0, jitter=0.0)


def stock_after_two_polls(ctx: StepContext) -> dict[str, bool]:
    if ctx.poll < 2:
        raise NotReady(f"no stock yet ({ctx.poll})")
    return {"ok": True}


def v1() -> Flow:
    return Flow(
        name="orders",
        version=1,
        steps=(
            ActionStep("reserve", scripted({"id": "r"}), compensate=scripted({"released": 1})),
            PollStep("await_stock", stock_after_two_polls, policy=POLL),
            ActionStep("ship", scripted({"shipped": 1})),
        ),
    )


def v2() -> Flow:
    return Flow(
        name="orders",
        version=2,
        steps=(
            ActionStep("check_fraud", scripted({"score": 0})),
            ActionStep("reserve", scripted({"id": "r2"}), compensate=scripted({"released": 2})),
            PollStep("await_stock", scripted({"ok": True}), policy=POLL),
            ActionStep("ship", scripted({"shipped": 2})),
            ActionStep("notify", scripted({"sent": True})),
        ),
    )


def test_old_flows_finish_on_v1_while_new_starts_run_v2() -> None:
    h = Harness(v1())
    old = [h.start("orders", {}, flow_id=f"old-{i}") for i in range(3)]
    for flow_id in old:  # each has reserved and waits for stock: mid-poll
        h.deliver_next(flow_id)
        h.deliver_next(flow_id)
    assert {h.flow(f).position.step for f in old} == {"await_stock"}

    h.deploy([v1(), v2()])  # the new version beside the old one
    new = h.start("orders", {}, flow_id="new-1")
    h.run()

    for flow_id in old:
        record = h.flow(flow_id)
        assert (record.status, record.version) == (Status.SUCCEEDED, 1)
        assert list(record.outputs) == ["reserve", "await_stock", "ship"]
    fresh = h.flow(new)
    assert (fresh.status, fresh.version) == (Status.SUCCEEDED, 2)
    assert list(fresh.outputs) == ["check_fraud", "reserve", "await_stock", "ship", "notify"]
    assert h.results(new)[0]["version"] == 2


def test_removing_v1_while_a_flow_runs_on_it_ends_it_definition_changed_and_compensated() -> None:
    h = Harness(v1())
    flow_id = h.start("orders", {})
    h.deliver_next(flow_id)  # reserve: done
    h.deliver_next(flow_id)  # first poll: not ready
    assert h.flow(flow_id).position.step == "await_stock"

    h.deploy(v2())  # v1 is gone
    record = h.run(flow_id)

    assert record is not None and record.status is Status.FAILED
    assert record.result is not None and record.result.code == "DEFINITION_CHANGED"
    assert "no version 1 any more (registered: 2)" in record.result.message
    # `reserve` is undone by v2's compensation (found by step name, not by position)
    assert [c.step for c in h.calls if c.kind == "compensate"] == ["reserve"]
    assert h.calls_of("reserve", undo=True)[0].version == 1
    assert record.effects[0].state == "undone"
    assert h.results(flow_id)[0]["code"] == "DEFINITION_CHANGED"

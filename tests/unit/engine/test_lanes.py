"""relayflow.core.engine.lanes: a ForEach's own tasks — it lists its items (a list of storable
JSON, or the step fails BAD_ITEMS), records its fan-out once, starts its lanes and ends its own
task; a lane's task runs the item steps, and a lane whose definition no longer fits is stopped.
Through relayflow.testing's harness, on a virtual clock."""

from __future__ import annotations

from typing import Any

import pytest

from relayflow import ActionStep, Flow, ForEach, NotReady, PollPolicy, PollStep, StepContext
from relayflow.core.engine import Ran
from relayflow.core.position import TaskKind
from relayflow.core.state import TERMINAL, Status
from relayflow.testing import Harness, scripted

POLL = PollPolicy(initial_s=5.0, multiplier=1.0, max_interval_s=5.0, jitter=0.0)


def ready(ctx: StepContext) -> dict[str, Any]:
    if ctx.poll < 1:
        raise NotReady("activating")
    return {"item": ctx.item}


def batch(items: Any = (1, 2, 3, 4, 5), *, wait: str = "await_active", version: int = 1) -> Flow:
    """prepare (undone) -> for each item: register, then ``wait`` (polls once) -> report."""
    listed = items if callable(items) else (lambda ctx: list(items))
    return Flow(
        name="batch",
        version=version,
        steps=(
            ActionStep("prepare", scripted({"ok": True}), compensate=scripted({})),
            ForEach(
                "each",
                items=listed,
                steps=(
                    ActionStep("register", scripted({"id": 1})),
                    PollStep(wait, ready, policy=POLL),
                ),
                concurrency=2,
            ),
            ActionStep("report", scripted({"done": True})),
        ),
    )


def fanned_out(h: Harness) -> str:
    """Start a batch and deliver until its ForEach has fanned out; the flow id."""
    flow_id = h.start("batch")
    h.deliver_next(flow_id)  # prepare; the ForEach's fan-out is due at once
    assert h.flow(flow_id).position.kind is TaskKind.FANOUT
    assert h.deliver_next(flow_id) is Ran.ADVANCED
    return flow_id


def test_a_foreach_fans_out_into_lanes_of_its_items_and_its_own_task_ends() -> None:
    h = Harness(batch())
    flow_id = fanned_out(h)
    record = h.flow(flow_id)
    assert record.status is Status.RUNNING
    assert record.history[-1].outcome == "fanned out"
    assert record.history[-1].detail == "5 items in 2 lanes"
    fan = record.tracks["each"].fanout
    assert fan is not None and (fan.total, fan.lanes) == (5, 2)
    assert record.tracks["each"].next is None  # the lanes report to it: no task of its own
    assert record.lanes == [f"{flow_id}.each.0", f"{flow_id}.each.1"]
    lanes = [h.flow(lane_id) for lane_id in record.lanes]
    assert [[i["index"] for i in lane.items] for lane in lanes] == [[0, 2, 4], [1, 3]]
    assert all(lane.next is not None and h.queue.exists(lane.next) for lane in lanes)


def test_the_lanes_run_the_item_steps_and_the_foreach_joins_their_outputs_in_order() -> None:
    h = Harness(batch())
    record = h.run(h.start("batch"))
    assert record is not None and record.status is Status.SUCCEEDED
    assert record.outputs["each"] == {"items": [{"item": i} for i in (1, 2, 3, 4, 5)], "failed": []}
    calls = [(c.step, c.context.item) for c in h.calls if c.step == "register"]
    assert sorted(item for _, item in calls) == [1, 2, 3, 4, 5]


def test_a_fan_out_task_delivered_again_starts_no_lane_twice() -> None:
    h = Harness(batch())
    flow_id = h.start("batch")
    h.deliver_next(flow_id)
    task = h.queue.only(flow_id)
    payload = h.queue.take(task.next.task_id)
    assert h.deliver(payload) is Ran.ADVANCED
    lanes = {k: v for k, v in h.store.docs.items() if k.startswith(f"{flow_id}.")}
    again = h.deliver(payload)
    assert again is Ran.STALE
    assert {k: v for k, v in h.store.docs.items() if k.startswith(f"{flow_id}.")} == lanes
    assert h.flow(flow_id).history[-1].outcome == "fanned out"  # recorded once


def test_a_foreach_without_items_is_done_at_once_with_no_lanes() -> None:
    h = Harness(batch(()))
    flow_id = fanned_out(h)
    record = h.flow(flow_id)
    assert record.outputs["each"] == {"items": [], "failed": []}
    assert record.lanes == [] and record.position.step == "report"
    assert [k for k in h.store.docs if k.startswith(f"{flow_id}.")] == []


def not_a_list(ctx: StepContext) -> Any:
    return "1,2,3"


def missing(ctx: StepContext) -> Any:
    return ctx.input["items"]


@pytest.mark.parametrize(
    ("items", "says"),
    [
        (not_a_list, "BadItems: items of 'each' is a str, not a list"),
        (lambda ctx: [{1, 2}], "BadItems: items of each[0] is a set, not a JSON value"),
        (missing, "KeyError: 'items'"),
    ],
    ids=["not-a-list", "not-json", "raises"],
)
def test_items_that_cannot_be_listed_fail_the_step_for_good_and_undo_the_flow(
    items: Any, says: str
) -> None:
    h = Harness(batch(items))
    record = h.run(h.start("batch"))
    assert record is not None and record.status is Status.FAILED
    assert record.result is not None and record.result.code == "BAD_ITEMS"
    assert record.result.message == says
    assert len(h.calls_of("prepare", undo=True)) == 1
    assert record.lanes == []


def test_a_lane_whose_item_steps_no_longer_fit_is_stopped_running_nothing() -> None:
    # given a batch whose lanes wait at ``await_active`` ...
    h = Harness(batch())
    flow_id = fanned_out(h)
    lanes = h.flow(flow_id).lanes
    for _ in lanes:
        h.deliver_next()  # each lane's register; its poll is next
    # ... when a deployment renames that step, then each lane's next task stops the lane
    h.deploy(batch(wait="await_ready"))
    for _ in lanes:
        assert h.deliver_next() is Ran.ADVANCED
    stopped = [h.flow(lane_id) for lane_id in lanes]
    assert {lane.status for lane in stopped} == {Status.CANCELLED}
    assert {lane.result.message for lane in stopped if lane.result} == {"the flow is being undone"}
    assert h.calls_of("await_ready") == [] and h.queue.due_first() is None


def test_a_flow_whose_lanes_were_stopped_by_a_new_definition_still_ends() -> None:
    h = Harness(batch())
    flow_id = fanned_out(h)
    for _ in h.flow(flow_id).lanes:
        h.deliver_next()
    h.deploy(batch(wait="await_ready", version=2))  # version 1 is no longer deployed
    h.run()
    h.advance(3600)
    h.sweep()
    h.run()
    assert h.flow(flow_id).status in TERMINAL

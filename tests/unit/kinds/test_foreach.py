"""relayflow.core.kinds.foreach: the planner's side of a ForEach — it fans out into lanes
(documents of their own, sharing the flow's input and incarnation), hears from them (items that
failed, lanes that ended), fails the flow past its tolerance, joins their outputs in the list's
order, and before undoing gathers their items' effects.

The flow here: ``prepare`` (undone) -> ``each`` (item step ``charge``, undone; three lanes,
tolerating one failed item) -> ``report``.
"""

from __future__ import annotations

from datetime import timedelta

from relayflow.core import planner
from relayflow.core.flows import ActionStep, Flow, ForEach
from relayflow.core.kinds import REGISTRY, Items
from relayflow.core.kinds.foreach import (
    cancel_lane,
    fanned_out,
    gathered,
    join_output,
    lane_id,
    lane_reported,
    lanes_started,
    new_lane,
)
from relayflow.core.planner import Completed, Plan
from relayflow.core.position import TaskKind
from relayflow.core.records import Effect, FlowRecord
from relayflow.core.state import Status
from tests.unit.planner.sample import NOW, QUEUES, noop

EACH = ForEach(
    "each",
    items=lambda ctx: [],
    steps=(ActionStep("charge", noop, compensate=noop),),
    concurrency=3,
    tolerate=1,
)
BATCH = Flow(
    name="batch",
    steps=(ActionStep("prepare", noop, compensate=noop), EACH, ActionStep("report", noop)),
)
PLAN = Plan(definition=BATCH, queues=QUEUES, now=NOW, kinds=REGISTRY)
ITEM_PLAN = Plan(definition=EACH.item_flow, queues=QUEUES, now=NOW, kinds=REGISTRY)
ITEMS = [{"sku": f"s-{i}"} for i in range(7)]


def at_each() -> FlowRecord:
    """The flow after ``prepare`` succeeded (its effect done): the ForEach's fan-out is due."""
    record = planner.new_record(
        PLAN, flow_id="b-1", input={"n": 7}, message_id=None, deadline_s=600
    )
    record = planner.begin_effect(PLAN, record.focused("prepare"))
    return planner.after(PLAN, record, Completed({"ok": True})).focused("each")


def fanned() -> FlowRecord:
    return fanned_out(PLAN, at_each(), ITEMS).focused("each")


def lane_done(record: FlowRecord, lane: int, *, failed: list[int] | None = None) -> FlowRecord:
    heard = lane_reported(PLAN, record, lane=lane, failed=failed or [], ended=True, detail="")
    assert heard is not None
    return heard.focused("each") if "each" in heard.tracks else heard


def test_a_lane_is_named_under_its_flows_key() -> None:
    assert lane_id("acme~b-1", "each", 2) == "acme~b-1.each.2"


def test_a_foreach_fans_out_into_at_most_its_concurrency_of_lanes() -> None:
    record = fanned()
    fan = record.tracks["each"].fanout
    assert fan is not None and (fan.total, fan.lanes, fan.failed, fan.ended) == (7, 3, [], [])
    assert record.lanes == ["b-1.each.0", "b-1.each.1", "b-1.each.2"]
    assert record.status is Status.RUNNING
    assert (record.history[-1].outcome, record.history[-1].detail) == (
        "fanned out",
        "7 items in 3 lanes",
    )
    few = fanned_out(PLAN, at_each(), ITEMS[:2])
    assert len(few.lanes) == 2


def test_a_foreach_of_no_items_is_done_at_once() -> None:
    done = fanned_out(PLAN, at_each(), [])
    assert done.outputs["each"] == {"items": [], "failed": []}
    assert done.lanes == [] and list(done.tracks) == ["report"]


def test_once_its_lanes_exist_the_foreachs_own_task_is_done() -> None:
    started = lanes_started(fanned())
    assert started.tracks["each"].next is None
    assert started.tracks["each"].fanout is not None  # it waits for the lanes to report


def test_a_lane_runs_every_concurrency_th_item_with_the_flows_input_and_incarnation() -> None:
    parent = fanned()
    lane = new_lane(ITEM_PLAN, parent, scope="each", lane=1, items=ITEMS)
    assert lane.flow_id == "b-1.each.1" and lane.parent == "b-1" and lane.lane == 1
    assert [i["index"] for i in lane.items] == [1, 4]
    assert lane.items[0]["item"] == {"sku": "s-1"}
    assert (lane.input, lane.created_at, lane.deadline_at) == (
        parent.input,
        parent.created_at,  # its idempotency keys are the flow's
        parent.deadline_at,  # the flow's deadline bounds its items too
    )
    position = lane.tracks["charge"].position
    assert (position.scope, position.item, position.kind) == ("each", 1, TaskKind.ACTION)


def test_lanes_that_end_are_heard_once_and_the_join_is_due_when_all_have() -> None:
    record = lane_done(fanned(), 0)
    assert lane_reported(PLAN, record, lane=0, failed=[], ended=True, detail="") is None
    record = lane_done(record, 2)
    assert record.position.kind is TaskKind.FANOUT  # one lane still runs
    joined = lane_done(record, 1)
    assert joined.position.kind is TaskKind.JOIN
    assert joined.next is not None and joined.next.run_at == NOW


def test_failed_items_within_its_tolerance_are_noted_and_the_flow_goes_on() -> None:
    record = lane_done(fanned(), 0, failed=[3])
    fan = record.tracks["each"].fanout
    assert fan is not None and fan.failed == [3]
    assert record.status is Status.RUNNING


def test_more_failed_items_than_tolerated_fail_the_flow_undoing_everything() -> None:
    record = lane_done(fanned(), 0, failed=[3])
    failed = lane_reported(PLAN, record, lane=1, failed=[4], ended=False, detail="item 4 failed")
    assert failed is not None
    assert failed.status is Status.COMPENSATING
    result = failed.pending_result
    assert result is not None and result.code == "ITEMS_FAILED"
    assert result.message == "2 of 7 items failed (tolerated: 1); item 4 failed"
    assert result.error is not None and result.error["items"] == [3, 4]
    assert failed.position.kind is TaskKind.GATHER  # the lanes' effects first


def test_a_stopped_lane_ends_cancelled_and_reports_nothing() -> None:
    lane = new_lane(ITEM_PLAN, fanned(), scope="each", lane=0, items=ITEMS)
    stopped = cancel_lane(ITEM_PLAN, lane)
    assert stopped is not None and stopped.status is Status.CANCELLED
    assert stopped.tracks == {} and stopped.result_published  # no news for its flow
    assert cancel_lane(ITEM_PLAN, stopped) is None


def test_the_join_lists_each_items_output_in_order_and_the_failed_ones() -> None:
    outputs = {"0": "a", "2": "c", "1": "b"}
    assert join_output(outputs, {4, 3}, 5) == {
        "items": ["a", "b", "c", None, None],
        "failed": [3, 4],
    }


def test_a_joined_foreach_is_done_with_its_items_output() -> None:
    joined = planner.after(
        PLAN,
        lane_done(lane_done(lane_done(fanned(), 0), 1), 2),
        Completed({"items": [1, 2], "failed": [1]}),
    )
    assert joined.outputs["each"] == {"items": [1, 2], "failed": [1]}
    entry = next(e for e in joined.history if e.kind is TaskKind.JOIN)
    # counted from the fan-out, not the output (which may be offloaded: a reference)
    assert entry.outcome == "items done (7, 0 failed)"
    assert list(joined.tracks) == ["report"]


def test_gathered_item_effects_are_undone_with_the_flows_newest_first() -> None:
    failing = planner.cancel(PLAN, fanned(), "stop")
    assert failing.position.kind is TaskKind.GATHER
    items = [
        Effect(step="each[0].charge", at=NOW + timedelta(seconds=5)),
        Effect(step="each[1].charge", at=NOW + timedelta(seconds=9)),
    ]
    undoing = gathered(PLAN, failing, items)
    assert undoing.gathered
    assert [e.step for e in undoing.effects] == ["prepare", "each[0].charge", "each[1].charge"]
    assert (undoing.position.step, undoing.position.item) == ("charge", 1)
    assert undoing.position.kind is TaskKind.COMPENSATE
    entry = undoing.history[-1]
    assert (entry.outcome, entry.detail) == ("gathered", "2 item effects from lanes")
    assert undoing.status is Status.COMPENSATING


def test_its_tasks_are_the_engines_own() -> None:
    kind = Items()
    assert all(kind.handler(EACH, task) is None for task in kind.tasks)
    assert all(kind.runs_itself(task) for task in kind.tasks)
    assert kind.inner(EACH) is EACH.item_flow
    assert kind.describe(EACH) == "for each item, 3 at a time, tolerating 1"
    assert not kind.makes_effects

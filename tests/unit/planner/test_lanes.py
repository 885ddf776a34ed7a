"""relayflow.core.planner.lanes: a ForEach lane runs its items one after another, each through
the item steps, keeping each item's output, and ends after its last.

The lane here is lane 1 of ForEach ``each`` (item steps ``charge`` then ``settle``, two lanes)
over five items, made as the ForEach's fan-out makes it: it runs items 1 and 3.
"""

from __future__ import annotations

from relayflow.core import planner
from relayflow.core.flows import ActionStep, Flow, ForEach, PollStep
from relayflow.core.kinds import REGISTRY
from relayflow.core.kinds.foreach import fanned_out, new_lane
from relayflow.core.planner import Completed, Plan
from relayflow.core.planner.lanes import item_done, next_item
from relayflow.core.records import FlowRecord
from relayflow.core.state import Status
from tests.unit.planner.sample import NOW, QUEUES, noop

EACH = ForEach(
    "each",
    items=lambda ctx: [],
    steps=(ActionStep("charge", noop), PollStep("settle", noop)),
    concurrency=2,
)
BATCH = Plan(definition=Flow(name="batch", steps=(EACH,)), queues=QUEUES, now=NOW, kinds=REGISTRY)
ITEMS = Plan(definition=EACH.item_flow, queues=QUEUES, now=NOW, kinds=REGISTRY)
LISTED = ["a", "b", "c", "d", "e"]


def lane() -> FlowRecord:
    record = planner.new_record(BATCH, flow_id="b-1", input={}, message_id=None, deadline_s=None)
    parent = fanned_out(BATCH, record.focused("each"), LISTED)
    return new_lane(ITEMS, parent, scope="each", lane=1, items=LISTED)


def through_its_steps(record: FlowRecord, output: dict[str, str]) -> FlowRecord:
    """The current item's two steps complete, the last with ``output``."""
    charged = planner.after(ITEMS, record.focused("charge"), Completed({"charged": True}))
    return planner.after(ITEMS, charged.focused("settle"), Completed(output))


def test_a_lane_starts_at_its_first_item_with_the_item_steps() -> None:
    record = lane()
    assert [i["index"] for i in record.items] == [1, 3]
    assert (record.item_index, record.status) == (1, Status.PENDING)
    position = record.tracks["charge"].position
    assert (position.step, position.scope, position.item) == ("charge", "each", 1)


def test_an_item_done_keeps_its_output_and_the_lane_goes_on_with_the_next() -> None:
    record = through_its_steps(lane(), {"settled": "b"})
    assert record.item_outputs == {"1": {"settled": "b"}}
    assert (record.item_index, record.status) == (3, Status.RUNNING)
    assert record.outputs == {} and list(record.tracks) == ["charge"]  # the next item afresh
    assert record.tracks["charge"].position.item == 3


def test_a_lane_ends_after_its_last_item() -> None:
    record = through_its_steps(through_its_steps(lane(), {"settled": "b"}), {"settled": "d"})
    assert record.status is Status.SUCCEEDED and record.tracks == {}
    assert record.item_outputs == {"1": {"settled": "b"}, "3": {"settled": "d"}}
    assert record.result is not None and record.result.message == "2 items done"


def test_item_done_stores_the_items_product_by_its_index() -> None:
    record = lane().model_copy(update={"outputs": {"charge": {"c": 1}, "settle": {"s": 2}}})
    done = item_done(ITEMS, record)
    assert done.item_outputs == {"1": {"s": 2}}  # the item steps' last output
    assert done.item_index == 3


def test_a_failed_items_lane_goes_on_without_its_output() -> None:
    record = next_item(ITEMS, lane())
    assert record.item_outputs == {} and record.item_index == 3
    assert record.status is Status.RUNNING and record.pending_result is None


def test_a_lane_of_a_later_generation_takes_the_id_its_fan_out_listed() -> None:
    record = planner.new_record(BATCH, flow_id="b-2", input={}, message_id=None, deadline_s=None)
    focused = record.focused("each")
    later = focused.model_copy(
        update={"position": focused.position.model_copy(update={"generation": 1})}
    )
    parent = fanned_out(BATCH, later, LISTED)
    # this release names a later generation's lanes with its suffix ...
    assert parent.lanes == ["b-2.each.0.g1", "b-2.each.1.g1"]
    assert new_lane(ITEMS, parent, scope="each", lane=1, items=LISTED).flow_id == "b-2.each.1.g1"
    # ... and a lane of a fan-out an earlier release committed (no suffix) keeps its listed id
    earlier = parent.model_copy(update={"lanes": ["b-2.each.0", "b-2.each.1"]})
    assert new_lane(ITEMS, earlier, scope="each", lane=1, items=LISTED).flow_id == "b-2.each.1"

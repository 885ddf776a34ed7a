"""A ForEach lane as a record: it runs its items one after the other, each through the item
steps, and ends after its last. (What its ForEach does with lanes is ``kinds.foreach``.)"""

from __future__ import annotations

from relayflow.core.planner.plan import Plan
from relayflow.core.planner.starts import start_ready
from relayflow.core.planner.states import finish, move, product
from relayflow.core.records import FlowRecord, Result
from relayflow.core.state import Status


def item_done(plan: Plan, record: FlowRecord) -> FlowRecord:
    """A lane's item ran all its steps: keep its output, go on with the next item."""
    index = record.item_index
    assert index is not None
    # Items of child flows keep their outputs in the children, so the lane stays small.
    kept = product(plan.flow, record) if plan.kinds.keep_outputs(plan.flow) else {}
    outputs = {**record.item_outputs, str(index): kept}
    return next_item(plan, record.model_copy(update={"item_outputs": outputs}))


def next_item(plan: Plan, record: FlowRecord) -> FlowRecord:
    """A lane moves to its next item (after one done, or failed and undone), or ends."""
    moved = move(plan, record, Status.RUNNING).model_copy(
        update={
            "cursor": record.cursor + 1,
            "outputs": {},
            "skipped": [],
            "tracks": {},
            "focus": None,
            "pending_result": None,
        }
    )
    if moved.item_index is None:  # past its last item: the lane has done its part
        done = len(moved.item_outputs) + moved.paged_items
        result = Result(status=Status.SUCCEEDED, code="OK", message=f"{done} items done")
        return finish(plan, moved, result)
    return start_ready(plan, moved, generation=record.position.generation)

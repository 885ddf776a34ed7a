"""The engine's part of ForEach: list the items and start the lanes, gather the lanes' outputs
when they have all ended, stop them and collect their effects before undoing, and pass each
lane's news (items failed, lane ended) to its flow.

A lane is a document of its own (``{key}.{step}.{lane}``, under its flow's key), run by the
same engine code as a flow, with the ForEach's item steps as its definition; only these
hand-overs between a lane and its flow are here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from relayflow.core.errors import PermanentError
from relayflow.core.flows import Flow, ForEach, StepContext
from relayflow.core.kinds import REGISTRY
from relayflow.core.kinds.child import children_output
from relayflow.core.kinds.foreach import cancel_lane, join_output, lane_reported, new_lane
from relayflow.core.planner import Plan
from relayflow.core.ports import FlowDocuments, Snapshot
from relayflow.core.records import Effect, EffectState, FlowRecord
from relayflow.core.state import ACTIVE, TERMINAL, Status
from relayflow.core.values import UnstorableValue, check_storable

log = logging.getLogger("relayflow.foreach")
# Reads a stored value of a record back (``Kernel.loaded``).
Load = Callable[[Any, FlowRecord], Any]
MAX_ITEMS = 10_000
MAX_ITEMS_BYTES = 512 * 1024


def _as_stored(stored: Any, record: FlowRecord) -> Any:
    return stored


class LaneFailed(PermanentError):
    """Raised when a lane ended without running all its items (aborted: its document would
    have been too large, its definition changed): the ForEach cannot be joined, and fails
    with the lane's code rather than output a None for each item it did not run."""


class BadItems(Exception):
    """Raised when a ForEach's ``items`` is not a list of storable JSON values."""


def list_items(each: ForEach, ctx: StepContext) -> list[Any]:
    """The ForEach's items, checked: a list of JSON values Firestore can store."""
    items = each.items(ctx)
    if not isinstance(items, list | tuple):
        raise BadItems(f"items of {each.name!r} is a {type(items).__name__}, not a list")
    if len(items) > MAX_ITEMS:
        raise BadItems(f"{each.name!r} has {len(items)} items; at most {MAX_ITEMS}")
    try:
        check_storable(list(items), where=f"items of {each.name}", max_bytes=MAX_ITEMS_BYTES)
    except UnstorableValue as exc:
        raise BadItems(str(exc)) from None
    return list(items)


def item_flow(flow: Flow, scope: str) -> Flow:
    """What a lane of ForEach ``scope`` runs: its item steps, as a flow."""
    return REGISTRY.inner(flow, scope)


def start_lanes(
    store: FlowDocuments, item_plan: Plan, parent: FlowRecord, scope: str, items: list[Any]
) -> list[FlowRecord]:
    """Create the ForEach's lanes that do not exist yet; every lane (to settle its task)."""
    track = parent.tracks[scope]
    assert track.fanout is not None
    lanes = []
    for k in range(track.fanout.lanes):
        lane = new_lane(item_plan, parent, scope=scope, lane=k, items=items)
        if not store.create(lane):
            existing = store.get(lane.flow_id)
            lane = existing if existing is not None else lane
        lanes.append(lane)
    return lanes


def read_lanes(store: FlowDocuments, parent: FlowRecord, scope: str) -> list[FlowRecord]:
    """The lanes of ForEach ``scope``, as stored."""
    prefix = f"{parent.key}.{scope}."
    found = [store.get(lane_id) for lane_id in parent.lanes if lane_id.startswith(prefix)]
    return [lane for lane in found if lane is not None]


def gather(store: FlowDocuments, plan: Plan, parent: FlowRecord) -> list[Effect]:
    """Stop every lane of the flow and return its items' effects: those that may be live, to
    undo, and those that are over (a failed item undid its own), bare, so that a retry that
    runs the items again counts them and calls under fresh idempotency keys."""
    effects: list[Effect] = []
    for lane_id in parent.lanes:
        stopped = store.change(lane_id, lambda lane: cancel_lane(plan, lane))
        lane = stopped or store.get(lane_id)
        if lane is not None:
            effects += [e if e.state.live else bare(e) for e in lane.effects]
    return effects


def bare(effect: Effect) -> Effect:
    """An effect that is over, as its flow keeps it: what was made and how it ended, without
    what only its undo would read."""
    return effect.model_copy(update={"output": None, "item": None, "token": None})


def left_to_undo(lanes: list[FlowRecord]) -> list[Effect]:
    """The effects of failed items whose undo the lanes left to their flow."""
    return [e for lane in lanes for e in lane.effects if e.state is EffectState.UNDO_PENDING]


def news(lane: FlowRecord) -> tuple[list[int], bool] | None:
    """What a lane has not yet told its flow: items that failed since, and whether it ended."""
    failed = lane.failed_items[lane.reported_failures :]
    ended = lane.status in TERMINAL and not lane.result_published
    return (failed, ended) if failed or ended else None


def report(store: FlowDocuments, plan: Plan, lane: FlowRecord) -> FlowRecord | None:
    """Tell the lane's flow what it has not heard; the flow as written (None if unchanged)."""
    told = news(lane)
    assert told is not None and lane.parent is not None and lane.scope is not None
    failed, ended = told
    generation = lane.position.generation
    detail = f"item {failed[0]} of lane {lane.lane} failed" if failed else ""

    def heard(current: FlowRecord) -> FlowRecord | None:
        track = current.tracks.get(lane.scope or "")
        stale = current.status not in ACTIVE or track is None or track.fanout is None
        if stale or current.position.generation != generation:
            return None
        focused = current.focused(lane.scope or "")
        assert lane.lane is not None
        return lane_reported(
            plan, focused, lane=lane.lane, failed=failed, ended=ended, detail=detail
        )

    return store.change(lane.parent, heard)


def mark_reported(store: FlowDocuments, lane: FlowRecord) -> None:
    """Remember that the lane's flow has heard everything the lane had to say."""

    def marked(current: FlowRecord) -> FlowRecord | None:
        update: dict[str, Any] = {"reported_failures": len(current.failed_items)}
        if current.status in TERMINAL:
            update["result_published"] = True
        return current.model_copy(update=update).stored()

    store.change(lane.flow_id, marked)


def join(
    store: FlowDocuments, found: Snapshot, *, keeps: bool = True, load: Load = _as_stored
) -> tuple[dict[str, Any], list[Effect]]:
    """The ForEach's output from its lanes (each item's output, in order, as ``load`` reads
    it back from the lane and its pages; ``keeps`` False, for a ForEach of child flows: a
    summary), and the effects of failed items whose undo the lanes left to the flow."""
    parent = found.record
    scope = parent.position.step
    fan = parent.tracks[scope].fanout
    assert fan is not None
    lanes = read_lanes(store, parent, scope)
    if not keeps:  # a ForEach of child flows: a summary, the outputs stay in the children
        return children_output(parent, scope, lanes, fan.total), left_to_undo(lanes)
    outputs: dict[str, Any] = {}
    for lane in lanes:
        if lane.status is not Status.SUCCEEDED and lane.result is not None:
            message = f"lane {lane.lane} of {scope} ended {lane.status}: {lane.result.message}"
            raise LaneFailed(message[:2000], code=lane.result.code)
        outputs.update(lane_outputs(lane, load))
    failed = {i for lane in lanes for i in lane.failed_items}
    return join_output(outputs, failed, fan.total), left_to_undo(lanes)


def lane_outputs(lane: FlowRecord, load: Load) -> dict[str, Any]:
    """A lane's items' outputs by index: those it moved into pages, then those it holds."""
    outputs: dict[str, Any] = {}
    for page in lane.item_pages:
        outputs.update(load(page, lane))
    outputs.update(load(lane.item_outputs, lane))
    return outputs


__all__ = [
    "BadItems",
    "LaneFailed",
    "gather",
    "item_flow",
    "join",
    "lane_outputs",
    "list_items",
    "mark_reported",
    "news",
    "read_lanes",
    "report",
    "start_lanes",
]

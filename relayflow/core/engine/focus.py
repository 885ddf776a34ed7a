"""Pure questions the engine asks of a stored flow before it changes it: which track a task is
for, whether the document still fits, whether the definition still fits the position."""

from __future__ import annotations

from collections.abc import Sequence

from relayflow.core import planner
from relayflow.core.flows import Flow
from relayflow.core.kinds import Kinds
from relayflow.core.planner import Plan
from relayflow.core.planner.chain import replayed
from relayflow.core.position import Position
from relayflow.core.records import FlowRecord, HistoryEntry
from relayflow.core.state import ACTIVE, TERMINAL

# The whole document stays under Firestore's 1 MiB (``MAX_OUTPUT_BYTES`` per step output keeps
# one step from taking it all) with room to spare for the history and the next write.
# https://cloud.google.com/firestore/quotas#collections_documents_and_fields
MAX_DOC_BYTES = 900 * 1024


def track_of(record: FlowRecord, position: Position) -> str | None:
    """The key of the active flow's track at ``position`` or whose poll chain ``position`` is
    a later poll of (None: a stale or duplicate task), or of an ended flow's clean-up."""
    if record.status in ACTIVE:
        exact = record.track_at(position)
        if exact is not None:
            return exact
        return next((k for k, t in record.tracks.items() if t.position.chains_to(position)), None)
    return record.track_at(position) if record.cleaning else None


def focused_at(
    record: FlowRecord, position: Position, carried: Sequence[HistoryEntry] = ()
) -> FlowRecord | None:
    """``record`` focused on its track at ``position``, or None if no track is there; for a
    later poll of a chain, moved on to it with the polls its task ``carried``."""
    key = track_of(record, position)
    return None if key is None else replayed(record.focused(key), position, carried)


def marked(record: FlowRecord) -> FlowRecord:
    """A flow's result event marked sent in the commit that ends it, when a task's delivery
    makes that commit: the delivery publishes the event before it answers, and if it cannot
    it unmarks the result (the sweeper then sends it) or, if it dies first, Cloud Tasks
    delivers the task again and that delivery sends it (``ended_by``). One write fewer per
    flow than committing, publishing, then marking."""
    if record.status not in TERMINAL or record.result is None or record.is_lane:
        return record
    if record.result_published:
        return record
    return record.model_copy(update={"result_published": True})


def ended_by(record: FlowRecord, position: Position) -> bool:
    """Whether ``record`` ended at ``position`` with a result its commit marked sent."""
    return (
        record.status in TERMINAL
        and record.result is not None
        and record.result_published
        and not record.is_lane
        and (
            record.position == position
            or (record.cleanup is not None and record.cleanup.from_position == position)
        )
    )


def fitting(plan: Plan, current: FlowRecord, planned: FlowRecord) -> FlowRecord:
    """``planned``, or the flow aborted if its document would exceed what Firestore stores."""
    size = len(planned.model_dump_json().encode("utf-8"))
    if size <= MAX_DOC_BYTES:
        return planned
    message = f"the flow document would be {size} bytes; Firestore stores at most 1 MiB"
    return planner.abort(plan, current, code="DOCUMENT_TOO_LARGE", message=message)


def mismatch(kinds: Kinds, flow: Flow, position: Position) -> str:
    """Why ``position`` no longer fits ``flow`` (its definition changed mid-flight), or ''."""
    if position.scope is not None:  # an item's step, undone by the flow
        scope = flow.named(position.scope) if position.scope in flow.graph.order else None
        inner = None if scope is None else kinds.of(scope).inner(scope)
        if inner is None:
            return f"flow {flow.name!r} has no ForEach {position.scope!r} any more"
        flow = inner
    if position.step_index >= len(flow.steps):
        return f"flow {flow.name!r} has no step {position.step_index} any more"
    step = flow.step(position.step_index)
    if step.name != position.step:
        return f"step {position.step_index} of {flow.name!r} is now {step.name!r}"
    why = kinds.of(step).fits(step, position)
    return f"{why} in {flow.name!r}" if why else ""

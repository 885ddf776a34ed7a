"""A flow waiting for its tenant's room: its one task tries for a slot again, and once it
is admitted its first steps are due."""

from __future__ import annotations

from datetime import datetime

from relayflow.core.planner.history import log, new_entry
from relayflow.core.planner.plan import Plan, schedule
from relayflow.core.planner.starts import start_ready
from relayflow.core.position import TaskKind
from relayflow.core.records import ADMIT_TRACK, FlowRecord, Track
from relayflow.core.state import Status


def admitted(plan: Plan, record: FlowRecord, *, slot: str | None) -> FlowRecord | None:
    """A waiting flow admitted (holding ``slot``): its first steps are due now. None if it is
    not waiting any more (admitted already, cancelled)."""
    if record.admission != "waiting" or record.status is not Status.PENDING:
        return None
    entry = new_entry(plan, record, "admitted", detail=f"slot {slot}" if slot else "")
    record = log(plan, record, entry, a_try=False).model_copy(
        update={"admission": "admitted", "slot": slot, "tracks": {}, "focus": None}
    )
    return start_ready(plan, record, generation=record.position.generation)


def await_admission(plan: Plan, record: FlowRecord, *, at: datetime) -> FlowRecord | None:
    """A waiting flow's one task: try for a slot again at ``at`` (when a slot has rested).
    None if it is not waiting, or has that task already."""
    if record.admission != "waiting" or ADMIT_TRACK in record.tracks:
        return None
    pos = record.position.model_copy(update={"kind": TaskKind.ADMIT, "rescue": 0})
    delay = max(0.0, (at - plan.now).total_seconds())
    track = Track(position=pos, next=schedule(plan, record, pos, delay), started_at=plan.now)
    return record.model_copy(update={"tracks": {ADMIT_TRACK: track}}).stored()


def admission_tried(record: FlowRecord) -> FlowRecord:
    """The waiting flow's slot retry is over (it will be handed a slot, or try again)."""
    tracks = {k: t for k, t in record.tracks.items() if k != ADMIT_TRACK}
    return record.model_copy(update={"tracks": tracks, "focus": None}).stored()

"""Recovering from what went missing: a delivery that kept crashing, a lost task (rescued
under a new name, then given up), a flow the sweeper sets aside."""

from __future__ import annotations

from datetime import datetime

from relayflow.core.errors import PermanentError
from relayflow.core.planner.cleanup import abandon_cleanup
from relayflow.core.planner.forward import after
from relayflow.core.planner.history import log, new_entry
from relayflow.core.planner.plan import Failed, Plan, schedule
from relayflow.core.planner.saga import begin_failure
from relayflow.core.planner.states import with_next
from relayflow.core.records import CLEANUP_TRACK, FlowRecord
from relayflow.core.state import Status


def crashed(plan: Plan, record: FlowRecord) -> FlowRecord:
    """Give up on a step whose deliveries kept ending without an outcome: an action fails
    (HANDLER_CRASHED) and is undone with the rest; a compensation is recorded as failed."""
    pos = record.position
    tries = pos.attempt + record.uncommitted
    message = (
        f"{tries} deliveries of {pos.step!r} ended without an outcome "
        "(the handler crashed, ran past its deadline, or could not commit)"
    )
    error = PermanentError(message, code="HANDLER_CRASHED")
    return after(plan, record, Failed(error))


def lost(plan: Plan, record: FlowRecord, *, rescues: int) -> FlowRecord:
    """End a flow whose task for one try was lost ``rescues`` times: FAILED (TASK_LOST), undone
    like any failure. (A task that keeps vanishing is a bug or a misconfigured queue; it must
    not be re-created for ever.)"""
    if record.focus == CLEANUP_TRACK:  # the flow has ended: only its clean-up can stop
        return abandon_cleanup(
            plan, record, f"its task for {record.position.label()} was lost {rescues + 1} times"
        ).stored()
    pos = record.position
    message = f"the task for {pos.label()} was lost {rescues + 1} times"
    error = {"code": "TASK_LOST", "message": message, "step": pos.step, "attempt": pos.attempt}
    return begin_failure(plan, record, Status.FAILED, error, "task lost").stored()


def set_aside(record: FlowRecord, until: datetime) -> FlowRecord:
    """The record with the sweeper's view of when it is due moved to ``until``: a flow the
    sweep could not settle (or found still queued) stops heading the overdue query. Its task
    (``next``) is unchanged; the next task made for it ends the setting aside."""
    return record.model_copy(update={"aside_until": until}).stored()


def rescue(plan: Plan, record: FlowRecord) -> FlowRecord:
    """Replace a lost next task with a fresh one under a new name (the old name is spent)."""
    assert record.next is not None
    position = record.position.model_copy(update={"rescue": record.position.rescue + 1})
    entry = new_entry(plan, record, "rescued", detail=f"task {record.next.task_id} was lost")
    moved = log(plan, record, entry, a_try=False).model_copy(update={"position": position})
    return with_next(moved, schedule(plan, moved, position, 0.0)).stored()

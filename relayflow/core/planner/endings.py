"""Ending a flow that cannot be planned any further (its definition changed or is gone, its
document would be too large), and marking its result event sent or not."""

from __future__ import annotations

from relayflow.core.planner.cleanup import abandon_cleanup
from relayflow.core.planner.history import log, new_entry
from relayflow.core.planner.plan import Plan
from relayflow.core.planner.saga import compensate_next, with_left_behind
from relayflow.core.planner.states import finish, stop_all
from relayflow.core.records import CLEANUP_TRACK, FlowRecord, Result
from relayflow.core.state import TERMINAL, Status


def abort(plan: Plan, record: FlowRecord, *, code: str, message: str) -> FlowRecord:
    """End an active flow FAILED at once, undoing nothing: the flow cannot be planned any
    further (its definition no longer matches its position, or its document would be too
    large to write)."""
    if record.focus == CLEANUP_TRACK:  # the flow has ended: only its clean-up can stop
        return abandon_cleanup(plan, record, message).stored()
    pos = record.position
    error = {"code": code, "message": message, "step": pos.step, "attempt": pos.attempt}
    result = Result(status=Status.FAILED, code=code, message=message, error=error)
    entry = new_entry(plan, record, "aborted", detail=message)
    return finish(plan, log(plan, record, entry, a_try=False), result).stored()


def definition_gone(plan: Plan, record: FlowRecord, *, message: str) -> FlowRecord:
    """End a flow whose version is no longer registered FAILED (DEFINITION_CHANGED), undoing
    what it did with the compensations of ``plan.flow`` (the newest version), by step name."""
    if record.focus == CLEANUP_TRACK:  # the flow has ended: only its clean-up can stop
        return abandon_cleanup(plan, record, message).stored()
    pos = record.position
    error = {"code": "DEFINITION_CHANGED", "message": message, "step": pos.step}
    result = Result(status=Status.FAILED, code="DEFINITION_CHANGED", message=message, error=error)
    entry = new_entry(plan, record, "definition changed", detail=message)
    logged = stop_all(log(plan, record, entry, a_try=False))
    return compensate_next(plan, logged, result).stored()


def unknown_flow(plan: Plan, record: FlowRecord, *, message: str) -> FlowRecord:
    """End a flow whose type no deployed version runs: FAILED (UNKNOWN_FLOW), undoing nothing
    (there are no handlers to undo with); the result names the effects left behind."""
    if record.focus == CLEANUP_TRACK:  # the flow has ended: only its clean-up can stop
        return abandon_cleanup(plan, record, message).stored()
    pos = record.position
    error = {"code": "UNKNOWN_FLOW", "message": message, "step": pos.step}
    result = Result(status=Status.FAILED, code="UNKNOWN_FLOW", message=message, error=error)
    entry = new_entry(plan, record, "unknown flow", detail=message)
    logged = log(plan, record, entry, a_try=False)
    return finish(plan, logged, with_left_behind(record, result)).stored()


def published(record: FlowRecord, *, generation: int) -> FlowRecord | None:
    """The record with generation ``generation``'s result event marked sent; None if that
    generation is not the ended one any more (an operator retried it) or it was marked."""
    ended = record.status in TERMINAL and record.position.generation == generation
    if not ended or record.result_published:
        return None
    return record.model_copy(update={"result_published": True})


def unpublished(record: FlowRecord, *, generation: int) -> FlowRecord | None:
    """The record with generation ``generation``'s result event marked not sent (its publish
    failed after the commit that ended the flow marked it); None if that is moot."""
    ended = record.status in TERMINAL and record.position.generation == generation
    if not ended or not record.result_published:
        return None
    return record.model_copy(update={"result_published": False})

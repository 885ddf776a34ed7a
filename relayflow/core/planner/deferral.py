"""Putting a task off (its tenant paused, its dependency's breaker open, its retry budget
spent) without spending a try, within the deadlines that bound it."""

from __future__ import annotations

from datetime import UTC, datetime

from relayflow.core.planner.cleanup import abandon_cleanup, hand_to_cleanup, may_hand_over
from relayflow.core.planner.history import log, new_entry, timeout_of
from relayflow.core.planner.plan import Plan, schedule
from relayflow.core.planner.saga import begin_failure
from relayflow.core.planner.states import with_next
from relayflow.core.position import TaskKind
from relayflow.core.records import CLEANUP_TRACK, FlowRecord
from relayflow.core.state import Status


def defer(
    plan: Plan,
    record: FlowRecord,
    *,
    until: datetime,
    why: str,
    hand_over: bool = False,
    dependency: str | None = None,
) -> FlowRecord:
    """Put off the focused task until ``until`` (its tenant paused, its dependency's breaker
    open, its retry budget spent): a new task under a new name, no attempt spent. A step
    that cannot run before its deadline ends the flow TIMED_OUT now (and undoes its effects);
    an undo is never timed out. ``hand_over`` (its dependency is down): an undo of a
    compensating flow is handed to the flow's clean-up, so the flow ends now; a clean-up's
    undo is put off at most to the end of its window, and given up once that has passed.
    ``dependency``: the one whose breaker or budget put it off, recorded on the flow (what
    ``relayflow list --dependency`` finds)."""
    if dependency is not None:
        record = record.model_copy(update={"dependency": dependency})
    pos = record.position
    if pos.kind is not TaskKind.COMPENSATE and until > deadline_of(plan, record):
        err = timeout_of(record, "DEADLINE_EXCEEDED", f"the deadline passes while {why}")
        return begin_failure(plan, record, Status.TIMED_OUT, err, "deferred")
    delay = max(0.0, (until - plan.now).total_seconds())
    pos = pos.model_copy(update={"deferral": pos.deferral + 1})
    if hand_over and pos.kind is TaskKind.COMPENSATE and may_hand_over(plan, record):
        return hand_to_cleanup(plan, record, pos, delay, why=why, a_try=False).stored()
    if record.focus == CLEANUP_TRACK:
        assert record.cleanup is not None
        if plan.now >= record.cleanup.until:
            return abandon_cleanup(plan, record, f"its undo window closed while {why}").stored()
        delay = min(delay, (record.cleanup.until - plan.now).total_seconds())
    entry = new_entry(plan, record, "deferred", detail=why, delay_s=delay)
    # A first claim was for the task put off: the delivery that put it off ran nothing.
    claim = None if record.claim is not None and record.claim.first else record.claim
    moved = log(plan, record, entry, a_try=False).model_copy(
        update={"position": pos, "claim": claim}
    )
    return with_next(moved, schedule(plan, moved, pos, delay)).stored()


def deadline_of(plan: Plan, record: FlowRecord) -> datetime:
    """The latest the focused step may still run: its poll or callback deadline, or the flow's
    (the far future when there is none)."""
    if record.position.kind in (TaskKind.POLL, TaskKind.WAIT) and record.step_started_at:
        return plan.kinds.at(plan.flow, record.position).deadline(plan, record)
    return record.deadline_at or datetime.max.replace(tzinfo=UTC)

"""Claims: a delivery holds the step it runs (invariant 4), and a claim left behind by a
delivery that never committed counts as a try."""

from __future__ import annotations

from datetime import timedelta

from relayflow.core.planner.effects import begin_effect
from relayflow.core.planner.plan import Plan, step_of
from relayflow.core.position import TaskKind
from relayflow.core.records import CLEANUP_TRACK, Claim, FlowRecord


def claim(plan: Plan, record: FlowRecord, *, lease_s: float, holder: str) -> FlowRecord:
    """The record with the current position claimed by ``holder`` (one delivery) for
    ``lease_s``; an action's effect is noted as begun in the same write.

    A claim left on this try by an earlier delivery means that delivery never committed (it
    crashed, timed out, or its commit failed): it counts toward the step's attempts.
    """
    pos = record.position
    held = record.claim
    uncommitted = record.uncommitted + (
        1 if held is not None and held.position.same_try(pos) else 0
    )
    lease = Claim(position=pos, until=plan.now + timedelta(seconds=lease_s), holder=holder)
    claimed = record.model_copy(update={"claim": lease, "uncommitted": uncommitted})
    return (begin_effect(plan, claimed) if pos.kind is TaskKind.ACTION else claimed).stored()


def is_claimed(plan: Plan, record: FlowRecord) -> bool:
    """Whether a delivery holds a live claim on the current position."""
    held = record.claim
    return (
        held is not None
        and held.position.same_try(record.position)
        and not held.released
        and held.until > plan.now
    )


def holds(record: FlowRecord, holder: str) -> bool:
    """Whether ``holder``'s claim is the one on the record (only its commit may land)."""
    return record.claim is not None and record.claim.holder == holder


def release(record: FlowRecord, holder: str) -> FlowRecord | None:
    """The record with ``holder``'s claim given up (its commit failed), or None if it holds none."""
    if record.claim is None or record.claim.holder != holder or record.claim.released:
        return None
    released = record.claim.model_copy(update={"released": True})
    return record.model_copy(update={"claim": released}).stored()


def exhausted(plan: Plan, record: FlowRecord) -> bool:
    """Whether the current action or compensation has been delivered as often as its retry
    policy allows (committed retries and deliveries that never committed alike)."""
    pos = record.position
    if record.focus == CLEANUP_TRACK:  # a clean-up's crashes are bounded by its window
        closed = record.cleanup is not None and plan.now >= record.cleanup.until
        return closed and record.uncommitted > 0
    step = step_of(plan, pos)
    policy = plan.kinds.of(step).retry(step)
    claimed = pos.kind in (TaskKind.ACTION, TaskKind.COMPENSATE)
    if policy is None or not claimed:
        return False
    return pos.attempt + record.uncommitted >= policy.max_attempts

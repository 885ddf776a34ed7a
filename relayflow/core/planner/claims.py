"""Claims: a delivery holds the step it runs (invariant 4), and a claim left behind by a
delivery that never committed counts as a try.

A flow's first steps are claimed in the write that creates the flow (``first_claims``), for
the first dispatch of their tasks: that delivery, told by Cloud Tasks' retry count that it is
no retry, runs without a claim write of its own and commits only if the claim is still the one
it read (``first_dispatch``). A retry of it, a late or rescued delivery, claims as any other
does, and a retry counts the delivery it retries as a try, so a handler that crashes its worker
every time still runs out of attempts.
"""

from __future__ import annotations

from datetime import timedelta

from relayflow.core.planner.effects import begin_effect
from relayflow.core.planner.plan import Plan, step_of
from relayflow.core.position import TaskKind
from relayflow.core.records import CLEANUP_TRACK, Claim, FlowRecord


def claim(
    plan: Plan, record: FlowRecord, *, lease_s: float, holder: str, redelivery: bool = True
) -> FlowRecord:
    """The record with the current position claimed by ``holder`` (one delivery) for
    ``lease_s``; an action's effect is noted as begun in the same write.

    A claim left on this try by an earlier delivery means that delivery never committed (it
    crashed, timed out, or its commit failed): it counts toward the step's attempts. So does
    a first claim (``first_claims``) that a delivery may have run under: unless this is the
    first dispatch of exactly its task (not ``redelivery``: Cloud Tasks' retry count is 0),
    come too late to run under it, and none released it. (A rescued task counts it: its lost
    twin may have run, then been given up by Cloud Tasks.) At most one try per flow goes
    uncounted so (a duplicate of a late first dispatch that crashed), so crashes stay bounded.
    """
    pos = record.position
    held = record.claim
    tried = held is not None and held.position.same_try(pos)
    if tried and held is not None and held.first:
        tried = redelivery or held.released or held.position != pos
    uncommitted = record.uncommitted + (1 if tried else 0)
    lease = Claim(position=pos, until=plan.now + timedelta(seconds=lease_s), holder=holder)
    claimed = record.model_copy(update={"claim": lease, "uncommitted": uncommitted})
    return (begin_effect(plan, claimed) if pos.kind is TaskKind.ACTION else claimed).stored()


def first_claims(plan: Plan, record: FlowRecord, *, lease_s: float) -> FlowRecord:
    """The record with each track at a claimed step whose task is due now claimed for that
    task's first dispatch, until ``lease_s`` after it is due, and an action's effect noted as
    begun: what that delivery's claim would write, written instead by the write that made the
    task (the flow's create)."""
    tracks, effects = dict(record.tracks), record.effects
    for key, track in record.tracks.items():
        nxt = track.next
        if nxt is None or nxt.run_at > plan.now or not plan.kinds.claims(track.position.kind):
            continue
        until = nxt.run_at + timedelta(seconds=lease_s)
        lease = Claim(position=nxt.position, until=until, holder=f"first:{nxt.task_id}", first=True)
        tracks[key] = track.model_copy(update={"claim": lease})
        if track.position.kind is TaskKind.ACTION:
            focused = record.model_copy(update={"effects": effects}).focused(key)
            effects = begin_effect(plan, focused).effects
    claimed = record.model_copy(update={"tracks": tracks, "effects": effects})
    # The focused copy of a single track is what a write stores: focus it again.
    return claimed if claimed.focus is None else claimed.focused(claimed.focus)


def first_claimed(record: FlowRecord) -> bool:
    """Whether the current position holds an untouched first claim for exactly its task."""
    held = record.claim
    return (
        held is not None and held.first and not held.released and held.position == record.position
    )


def first_dispatch(plan: Plan, record: FlowRecord, *, lease_s: float) -> bool:
    """Whether the first dispatch of the task at the current position may run under the
    first claim taken for it: the claim is untouched, for exactly this task, and still covers
    a whole lease from now. A first dispatch that comes later claims for itself, at once (a
    duplicate of it running on time holds the same key), so no delivery ever runs with less
    of a lease than a claim of its own would give it."""
    held = record.claim
    return (
        first_claimed(record)
        and held is not None
        and plan.now + timedelta(seconds=lease_s) <= held.until
    )


def is_claimed(plan: Plan, record: FlowRecord) -> bool:
    """Whether a delivery holds (or, for a first claim, may hold) a live claim on the current
    position. A first claim is for one task: a put-off step's new task is not held by it."""
    held = record.claim
    if held is None or held.released or held.until <= plan.now:
        return False
    if held.first:
        return held.position == record.position
    return held.position.same_try(record.position)


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

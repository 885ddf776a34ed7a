"""Clean-up: undoing after the flow has ended. An undo that cannot be done now (its
dependency down, its tries spent) goes on after the flow ends, on a long backoff, for the
undo window; a flow that succeeded undoes here what its failed ForEach items left to it."""

from __future__ import annotations

from datetime import timedelta

from relayflow.core.backoff import compute_delay
from relayflow.core.errors import RetryableError
from relayflow.core.planner.effects import TO_UNDO, next_compensation, set_effect, undo_position
from relayflow.core.planner.history import describe, log, new_entry
from relayflow.core.planner.plan import MAX_RETRY_AFTER_S, Completed, Outcome, Plan, Retry, schedule
from relayflow.core.planner.states import finish, with_next
from relayflow.core.position import Position
from relayflow.core.records import (
    CLEANUP_TRACK,
    Cleanup,
    CleanupState,
    Effect,
    EffectState,
    FlowRecord,
    Track,
)
from relayflow.core.state import Status


def may_hand_over(plan: Plan, record: FlowRecord) -> bool:
    """Whether an undo that cannot be done now can go on as the clean-up of the flow it ends
    (not a lane's: its flow decides; not with the clean-up off)."""
    return (
        plan.undo_window_s > 0
        and not record.is_lane
        and record.status is Status.COMPENSATING
        and record.pending_result is not None
    )


def hand_to_cleanup(
    plan: Plan, record: FlowRecord, nxt: Position, delay_s: float, *, why: str, a_try: bool
) -> FlowRecord:
    """End the compensating flow with its pending result, now; its undo of the focused effect
    (then of the older ones) goes on as its clean-up, from ``nxt`` in ``delay_s``."""
    assert record.pending_result is not None
    entry = new_entry(plan, record, "clean-up pending", detail=why, delay_s=delay_s)
    ended = finish(plan, log(plan, record, entry, a_try=a_try), record.pending_result)
    window = timedelta(seconds=plan.undo_window_s)
    cleanup = Cleanup(since=plan.now, until=plan.now + window, from_position=record.position)
    return cleanup_track(plan, ended.model_copy(update={"cleanup": cleanup}), nxt, delay_s)


def clean_up_after(plan: Plan, ended: FlowRecord) -> FlowRecord:
    """A flow that succeeded with the undo of a failed ForEach item left to it: its clean-up
    undoes those (and only those) from now."""
    first = next_compensation(plan, ended, item=None, states=cleanup_states(ended))
    if first is None:
        return ended
    window = timedelta(seconds=plan.undo_window_s)
    cleanup = Cleanup(since=plan.now, until=plan.now + window)
    ended = ended.model_copy(update={"cleanup": cleanup})
    return cleanup_track(plan, ended, undo_position(plan, ended, first), 0.0)


def cleanup_states(record: FlowRecord) -> tuple[EffectState, ...]:
    """What a clean-up undoes: every effect that may be live, for a flow that failed; for one
    that succeeded, only the effects of failed items whose undo was left to it."""
    return (EffectState.UNDO_PENDING,) if record.status is Status.SUCCEEDED else TO_UNDO


def cleanup_track(plan: Plan, record: FlowRecord, pos: Position, delay_s: float) -> FlowRecord:
    """The ended flow's one track: the clean-up's undo at ``pos``, due in ``delay_s``."""
    track = Track(position=pos, next=schedule(plan, record, pos, delay_s), started_at=plan.now)
    moved = record.model_copy(update={"tracks": {CLEANUP_TRACK: track}, "aside_until": None})
    return moved.focused(CLEANUP_TRACK)


def cleanup_delay(plan: Plan, record: FlowRecord, *, tries: int, error: RetryableError) -> float:
    """How long the clean-up waits after its ``tries``-th failed try of the focused undo: a
    long curve (hash-derived jitter), at least the dependency's Retry-After."""
    curve = compute_delay(
        n=tries,
        initial_s=min(plan.undo_initial_s, plan.undo_max_interval_s),
        multiplier=2.0,
        max_interval_s=plan.undo_max_interval_s,
        key=f"{record.flow_id}:{record.position.effect_name}:cleanup",
    )
    return max(curve, min(error.retry_after_s or 0.0, MAX_RETRY_AFTER_S))


def after_cleanup(plan: Plan, record: FlowRecord, outcome: Outcome) -> FlowRecord:
    """The clean-up's undo ended: the next one (newest first), or the clean-up is over."""
    pos, cleanup = record.position, record.cleanup
    assert cleanup is not None
    if isinstance(outcome, Retry):
        return retry_cleanup(plan, record, outcome.error)
    undone = isinstance(outcome, Completed)
    detail = "" if undone else describe(outcome)
    outcome_name = "compensated" if undone else "compensation failed"
    record = log(plan, record, new_entry(plan, record, outcome_name, detail=detail))
    record = set_effect(
        record, pos.effect_name, state=EffectState.UNDONE if undone else EffectState.UNDO_FAILED
    )
    left = cleanup.left if undone else [*cleanup.left, pos.effect_name]
    record = record.model_copy(
        update={"cleanup": cleanup.model_copy(update={"tries": 0, "left": left})}
    )
    return cleanup_next(plan, record)


def cleanup_next(plan: Plan, record: FlowRecord) -> FlowRecord:
    effect = next_compensation(plan, record, item=None, states=cleanup_states(record))
    if effect is None:
        return end_cleanup(plan, record)
    pos = undo_position(plan, record, effect, undo_round=record.position.undo_round)
    return cleanup_track(plan, record, pos, 0.0)


def retry_cleanup(plan: Plan, record: FlowRecord, error: RetryableError) -> FlowRecord:
    """Try the undo again on the long backoff; the last wait lands on the window's end, and a
    failure after it gives the clean-up up."""
    pos, cleanup = record.position, record.cleanup
    assert cleanup is not None
    left_s = (cleanup.until - plan.now).total_seconds()
    if left_s <= 0:
        return abandon_cleanup(plan, record, f"its undo window closed; last: {error.message}")
    tries = cleanup.tries + 1
    delay = min(cleanup_delay(plan, record, tries=tries, error=error), left_s)
    entry = new_entry(plan, record, "retryable error", detail=error.message, delay_s=delay)
    nxt = pos.model_copy(update={"attempt": pos.attempt + 1})
    update = {"position": nxt, "cleanup": cleanup.model_copy(update={"tries": tries})}
    moved = log(plan, record, entry).model_copy(update=update)
    return with_next(moved, schedule(plan, moved, nxt, delay))


def abandon_cleanup(plan: Plan, record: FlowRecord, why: str) -> FlowRecord:
    """Give the clean-up up: every effect it had still to undo is recorded as left behind
    (its undo failed: it may be live), and the clean-up ends ABANDONED."""
    cleanup = record.cleanup
    assert cleanup is not None
    left = list(cleanup.left)
    while (effect := next_compensation_or_none(plan, record)) is not None:  # newest first
        record = set_effect(record, effect.step, state=EffectState.UNDO_FAILED)
        left.append(effect.step)
    update = {"left": left, "reason": why[:500]}
    return end_cleanup(
        plan, record.model_copy(update={"cleanup": cleanup.model_copy(update=update)})
    )


def next_compensation_or_none(plan: Plan, record: FlowRecord) -> Effect | None:
    """The next effect to undo, or None also when the flow's type is not deployed."""
    states = cleanup_states(record)
    if plan.definition is None:
        live = [e for e in record.effects if e.state in states]
        return live[-1] if live else None
    return next_compensation(plan, record, item=None, states=states)


def end_cleanup(plan: Plan, record: FlowRecord) -> FlowRecord:
    """The clean-up is over: DONE when nothing was left behind, else ABANDONED; its event
    (the result event again, with the clean-up's end) is due."""
    ending = record.cleanup
    assert ending is not None
    state = CleanupState.ABANDONED if ending.left else CleanupState.DONE
    detail = ending.reason if state is CleanupState.ABANDONED else ""
    if state is CleanupState.ABANDONED and not detail:
        detail = f"not undone: {', '.join(ending.left)}"
    entry = new_entry(plan, record, f"clean-up {state}", detail=detail)
    record = log(plan, record, entry, a_try=False)
    cleanup = ending.model_copy(update={"state": state, "finished_at": plan.now})
    return record.model_copy(
        update={
            "cleanup": cleanup,
            "tracks": {},
            "focus": None,
            "next": None,
            "claim": None,
            "next_run_at": None,
            "aside_until": None,
            "result_published": False,
        }
    )

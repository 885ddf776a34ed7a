"""The saga: ending a flow that failed (or was cancelled) by first undoing every effect that
may be live, newest first, one undo track at a time."""

from __future__ import annotations

from typing import Any

from relayflow.core.errors import RetryableError
from relayflow.core.planner.cleanup import (
    after_cleanup,
    cleanup_delay,
    hand_to_cleanup,
    may_hand_over,
)
from relayflow.core.planner.effects import (
    TO_UNDO,
    index_in,
    next_compensation,
    set_effect,
    undo_position,
)
from relayflow.core.planner.history import describe, log, new_entry
from relayflow.core.planner.lanes import next_item
from relayflow.core.planner.plan import (
    MAX_RETRY_AFTER_S,
    Completed,
    Outcome,
    Plan,
    Retry,
    schedule,
    step_of,
)
from relayflow.core.planner.states import finish, move, stop_all, with_next
from relayflow.core.position import Position, TaskKind
from relayflow.core.records import (
    CLEANUP_TRACK,
    UNDO_TRACK,
    Effect,
    EffectState,
    FlowRecord,
    Result,
    Track,
)
from relayflow.core.state import Status


def begin_failure(
    plan: Plan, record: FlowRecord, status: Status, error: dict[str, Any], seen: str
) -> FlowRecord:
    """End the flow as ``status``, first undoing every effect that may be live. Steps running
    in parallel are stopped: their tasks become stale, and their effects (recorded when they
    claimed) are undone with the rest."""
    result = Result(status=status, code=error["code"], message=error["message"], error=error)
    record = log(plan, record, new_entry(plan, record, seen, detail=error["message"]))
    if record.is_lane:  # a lane never fails: its item does, and the flow decides
        index = record.item_index
        assert index is not None
        record = record.model_copy(update={"failed_items": [*record.failed_items, index]})
    return compensate_next(plan, stop_all(record), result)


def compensate_next(plan: Plan, record: FlowRecord, result: Result) -> FlowRecord:
    """Undo the newest effect that may be live and can be undone; end the flow when none is."""
    if plan.definition is None:  # no handlers to undo with: say what stays behind
        return finish(plan, record, with_left_behind(record, result))
    if record.lanes and not record.gathered:  # first collect what the items did
        return gather_at(plan, record, result)
    only = record.item_index if record.is_lane else None  # a lane undoes its failed item
    # ... but not what it left to its flow to undo
    states = (EffectState.UNKNOWN, EffectState.DONE) if record.is_lane else TO_UNDO
    effect = next_compensation(plan, record, item=only, states=states)
    if effect is None:
        return next_item(plan, record) if record.is_lane else finish(plan, record, result)
    return compensate_at(plan, record, effect, result)


def with_left_behind(record: FlowRecord, result: Result) -> Result:
    live = [e.step for e in record.effects if e.state in (EffectState.UNKNOWN, EffectState.DONE)]
    if not live:
        return result
    return result.model_copy(update={"error": {**(result.error or {}), "not_undone": live}})


def compensate_at(plan: Plan, record: FlowRecord, effect: Effect, result: Result) -> FlowRecord:
    """Start undoing ``effect``: the flow's only track is the undo track. (A lane undoing its
    failed item stays RUNNING: it goes on with its next item afterwards.)"""
    return undo_track(plan, record, undo_position(plan, record, effect), result)


def undo_track(plan: Plan, record: FlowRecord, pos: Position, result: Result) -> FlowRecord:
    status = Status.RUNNING if record.is_lane else Status.COMPENSATING
    return undoing(plan, record.model_copy(update={"pending_result": result}), pos, status)


def undoing(plan: Plan, record: FlowRecord, pos: Position, status: Status) -> FlowRecord:
    """The record, ``status``, whose only track is the undo at ``pos``, due now."""
    nxt = schedule(plan, record, pos, 0.0)
    track = Track(position=pos, next=nxt, started_at=plan.now)
    moved = move(plan, record, status).model_copy(
        update={"tracks": {UNDO_TRACK: track}, "aside_until": None}
    )
    return moved.focused(UNDO_TRACK)


def gather_at(plan: Plan, record: FlowRecord, result: Result) -> FlowRecord:
    """Before undoing: a task that stops the ForEach lanes and brings their items' effects
    here, so everything is undone in one order, newest first."""
    scope = record.lanes[0].split(".")[1]
    index = index_in(plan, None, scope)
    pos = Position(
        generation=record.position.generation, step_index=index, step=scope, kind=TaskKind.GATHER
    )
    return undo_track(plan, record, pos, result)


def after_compensation(plan: Plan, record: FlowRecord, outcome: Outcome) -> FlowRecord:
    if record.focus == CLEANUP_TRACK:
        return after_cleanup(plan, record, outcome)
    pos = record.position
    again = undo_retried(plan, record, outcome)
    if again is not None:
        return again
    if isinstance(outcome, Retry) and may_hand_over(plan, record):
        # Its tries are spent and it may still succeed later: the flow ends now, and the
        # undo goes on as its clean-up, on the long backoff.
        nxt = pos.model_copy(update={"attempt": pos.attempt + 1})
        delay = cleanup_delay(plan, record, tries=0, error=outcome.error)
        why = f"retryable error: {outcome.error.message}"
        return hand_to_cleanup(plan, record, nxt, delay, why=why, a_try=True)
    if isinstance(outcome, Retry) and record.is_lane and plan.undo_window_s > 0:
        return leave_undo_to_flow(plan, record, outcome.error)
    detail = "" if isinstance(outcome, Completed) else describe(outcome)
    undone = isinstance(outcome, Completed)
    outcome_name = "compensated" if undone else "compensation failed"
    record = log(plan, record, new_entry(plan, record, outcome_name, detail=detail))
    state = EffectState.UNDONE if undone else EffectState.UNDO_FAILED
    record = set_effect(record, pos.effect_name, state=state)
    assert record.pending_result is not None
    result = record.pending_result
    if not isinstance(outcome, Completed):
        failures = [*(result.error or {}).get("compensation_failures", []), pos.effect_name]
        result = result.model_copy(
            update={"error": {**(result.error or {}), "compensation_failures": failures}}
        )
    return compensate_next(plan, record, result)


def undo_retried(plan: Plan, record: FlowRecord, outcome: Outcome) -> FlowRecord | None:
    """The focused undo tried again on its step's retry policy, if ``outcome`` is a retryable
    error and the policy has tries left; None if not."""
    pos = record.position
    step = step_of(plan, pos)
    policy = plan.kinds.of(step).retry(step)
    assert policy is not None
    tries = pos.attempt + 1 + record.uncommitted
    if not isinstance(outcome, Retry) or tries >= policy.max_attempts:
        return None
    key = f"{record.flow_id}:{pos.effect_name}:undo"
    delay = policy.delay_s(retry=pos.attempt, key=key)
    delay = max(delay, min(outcome.error.retry_after_s or 0.0, MAX_RETRY_AFTER_S))
    entry = new_entry(plan, record, "retryable error", detail=outcome.error.message, delay_s=delay)
    nxt = pos.model_copy(update={"attempt": pos.attempt + 1})
    moved = log(plan, record, entry).model_copy(update={"position": nxt})
    return with_next(moved, schedule(plan, moved, nxt, delay))


def leave_undo_to_flow(plan: Plan, record: FlowRecord, error: RetryableError) -> FlowRecord:
    """A lane's undo of its failed item whose tries are spent: the effect is left for its
    flow to undo (``undo_pending``: gathered and undone if the flow fails, its clean-up's if
    the flow succeeds), and the lane goes on with its next item."""
    pos = record.position
    entry = new_entry(plan, record, "undo left to the flow", detail=error.message)
    record = set_effect(log(plan, record, entry), pos.effect_name, state=EffectState.UNDO_PENDING)
    assert record.pending_result is not None
    return compensate_next(plan, record, record.pending_result)

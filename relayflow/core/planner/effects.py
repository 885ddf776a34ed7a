"""A flow's effects: what its actions may have done in the world, noted as begun before each
call, marked done, refused or undone, and which one is undone next (newest first)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from relayflow.core.errors import UnknownFlow
from relayflow.core.flows import Step
from relayflow.core.planner.plan import Plan
from relayflow.core.position import Position, TaskKind, split_effect_name
from relayflow.core.records import Effect, EffectState, FlowRecord

# Effects that may be live and that an undo has not given up on.
TO_UNDO = (EffectState.UNKNOWN, EffectState.DONE, EffectState.UNDO_PENDING)


def begin_effect(plan: Plan, record: FlowRecord) -> FlowRecord:
    """The record with the current action's effect noted as begun (unknown), before the call.

    A step whose earlier effect may still be live (a retried flow) keeps that one: its call
    carries the same idempotency key and finds it rather than making a second.
    """
    pos = record.position
    name = pos.effect_name
    if record.live_effect(name) is not None:
        return record
    over = sum(1 for e in record.effects if e.step == name)  # none is live: all are over
    item = record.items[record.cursor]["item"] if record.item_index is not None else None
    # A callback step's token: its undo sees the one its run sent, so that replaying the run
    # under its key (its answers were lost) sends the same request.
    track = record.tracks.get(record.focus or "")
    token = track.token if track is not None else None
    effect = Effect(
        step=name, n=over, generation=pos.generation, at=plan.now, item=item, token=token
    )
    return record.model_copy(update={"effects": [*record.effects, effect]})


def effect_done(plan: Plan, record: FlowRecord, step: str, output: dict[str, Any]) -> FlowRecord:
    if record.live_effect(step) is None:
        record = begin_effect(plan, record)
    return set_effect(record, step, state=EffectState.DONE, done_at=plan.now, output=output)


def set_effect(record: FlowRecord, step: str, **update: Any) -> FlowRecord:
    effects = [
        e.model_copy(update=update) if e.step == step and e.state.live else e
        for e in record.effects
    ]
    return record.model_copy(update={"effects": effects})


def forget_first_try(record: FlowRecord) -> FlowRecord:
    """Mark refused the effect a permanent error ended on its first try: the call was refused,
    and no earlier try can have made it. (It stays listed, so a retried flow calls again under
    a fresh key rather than replaying the refusal.)"""
    pos = record.position
    effect = record.live_effect(pos.effect_name)
    first = pos.kind is TaskKind.ACTION and pos.attempt == 0 and record.uncommitted == 0
    if effect is None or not first or effect.state is not EffectState.UNKNOWN:
        return record
    if effect.generation != pos.generation:
        return record  # begun by an earlier generation: it may be live
    return set_effect(record, pos.effect_name, state=EffectState.REFUSED)


def next_compensation(
    plan: Plan,
    record: FlowRecord,
    *,
    item: int | None,
    states: tuple[EffectState, ...] = TO_UNDO,
) -> Effect | None:
    """The effect undone next: done or unknown (its responses may have been lost), or left
    pending, newest first, with a compensation in the plan's flow (of the item ``item`` only, if
    given; of ``states`` only)."""
    return next(undo_order(plan, record, item=item, states=states), None)


def undo_order(
    plan: Plan,
    record: FlowRecord,
    *,
    item: int | None = None,
    states: tuple[EffectState, ...] = TO_UNDO,
) -> Iterator[Effect]:
    """Every effect of ``states`` (of the item ``item`` only, if given) that the plan's flow
    has a compensation for, in the order they are undone: newest first. Lazy: the saga takes
    only the first of what may be a gathered ForEach's thousands."""
    pending = [
        (effect.order, i, effect)
        for i, effect in enumerate(record.effects)
        if effect.state in states
    ]
    # Newest first; effects of one instant in the reverse of the order they were recorded.
    for _, _, effect in sorted(pending, key=lambda t: (t[0], t[1]), reverse=True):
        if item is not None and split_effect_name(effect.step)[1] != item:
            continue
        if undoable_by(plan, effect):
            yield effect


def undoable_by(plan: Plan, effect: Effect) -> bool:
    """Whether the plan's flow has a compensation for ``effect``'s step."""
    scope, _, name = split_effect_name(effect.step)
    try:
        step: Step | None = plan.kinds.container(plan.flow, scope).named(name)
    except KeyError:
        step = None
    return step is not None and plan.kinds.of(step).compensation(step) is not None


def index_in(plan: Plan, scope: str | None, step: str) -> int:
    """The index of ``step`` in the flow, or in the steps of ForEach ``scope``."""
    index = plan.kinds.container(plan.flow, scope).index_of(step)
    if index is None:
        raise UnknownFlow(f"flow {plan.flow.name!r} has no step {step!r} any more")
    return index


def undo_position(plan: Plan, record: FlowRecord, effect: Effect, **update: int) -> Position:
    """Where undoing ``effect`` starts (``update``: its try and clean-up round)."""
    scope, item, step = split_effect_name(effect.step)
    return Position(
        generation=record.position.generation,
        step_index=index_in(plan, scope, step),
        step=step,
        kind=TaskKind.COMPENSATE,
        scope=scope,
        item=item,
        **update,
    )


def adopted(record: FlowRecord, effects: list[Effect]) -> FlowRecord:
    """The record with ``effects`` (of its ForEach items) among its own, unless it has them."""
    known = {e.step for e in record.effects}
    merged = [*record.effects, *(e for e in effects if e.step not in known)]
    return record.model_copy(update={"effects": merged})

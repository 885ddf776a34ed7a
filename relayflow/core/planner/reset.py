"""Reset to a step: an operator runs an ended flow again from step S, as a new generation.

What S is and what runs after it (S's descendants in the graph) runs again; their effects
are undone first, newest first, by the saga's compensations and retries (or, by choice,
kept live: each step then replays its effect under the same idempotency key). Everything
else — the steps before S, parallel branches that do not run after S — keeps its output and
its effects. ``scope_of`` decides all of it once; ``reset`` does it and ``preview_reset``
says it, both from that one answer, so a dry run lists exactly what the reset then does.

A reset's undo runs on the undo track with the flow RUNNING (it is not on its way to an
end, as the saga's is); once its last undo is done it drops the outputs of the steps that
run again and starts those that are ready. An undo that fails for good (or whose tries are
spent) ends the flow FAILED (``RESET_UNDO_FAILED``), naming what was not undone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from relayflow.core.errors import InvalidTransition, UnknownFlow
from relayflow.core.flows import Flow, ForEach
from relayflow.core.planner.effects import set_effect, undo_order, undo_position
from relayflow.core.planner.history import describe, log, new_entry
from relayflow.core.planner.operations import lanes_over, outputs_kept, skipped_by_choices
from relayflow.core.planner.plan import Completed, Outcome, Plan, Retry
from relayflow.core.planner.previews import Preview
from relayflow.core.planner.saga import after_compensation, undo_retried, undoing
from relayflow.core.planner.starts import start_ready
from relayflow.core.planner.states import finish, move
from relayflow.core.position import split_effect_name
from relayflow.core.records import UNDO_TRACK, Effect, EffectState, FlowRecord, Reset, Result
from relayflow.core.state import ACTIVE, Status

RESET_UNDO_FAILED = "RESET_UNDO_FAILED"
# Effects a reset with undo undoes when their step runs again: any that may be live, an
# undo that failed for good included (it is tried again).
LIVE = (
    EffectState.UNKNOWN,
    EffectState.DONE,
    EffectState.UNDO_PENDING,
    EffectState.UNDO_FAILED,
)


@dataclass(frozen=True)
class Scope:
    """What a reset to ``step`` does: the steps that run again (definition order), the
    effects it undoes first (newest first), and the effects that stay live (as recorded)."""

    step: str
    rerun: tuple[str, ...]
    undone: tuple[Effect, ...]
    kept: tuple[Effect, ...]


def scope_of(plan: Plan, record: FlowRecord, step: str, *, undo: bool) -> Scope:
    """What resetting ``record`` to ``step`` would do; InvalidTransition saying why if it
    cannot be done."""
    refuse_state(record)
    flow = plan.flow
    refuse_step(flow, step)
    later = downstream(flow, step)
    kept = {s: out for s, out in outputs_kept(plan, record).items() if s not in later}
    skipped = skipped_by_choices(flow, kept)
    if step in skipped:
        choice = next(c for c, (a, b) in flow.graph.branches.items() if step in (*a, *b))
        raise InvalidTransition(
            f"step {step!r} is in the branch choice {choice!r} did not take: it would not run "
            f"(reset to {choice!r} to decide again)"
        )
    rerun = tuple(s for s in flow.graph.order if s not in kept and s not in skipped)
    refuse_rerun(flow, record, rerun, undo=undo)
    chosen = undo_order(plan, record, states=LIVE) if undo else iter(())
    undone = tuple(e for e in chosen if owner(e) in later)
    names = {e.step for e in undone}
    live = tuple(e for e in record.effects if e.state.live and e.step not in names)
    return Scope(step=step, rerun=rerun, undone=undone, kept=live)


def refuse_state(record: FlowRecord) -> None:
    """InvalidTransition unless the flow is one a reset may run again: ended, its clean-up
    over, not a child (its parent's reset runs it again)."""
    if record.status in ACTIVE:
        raise InvalidTransition(
            f"the flow is {record.status}: a reset runs an ended flow again "
            "(cancel it first, or wait for its end)"
        )
    if record.cleaning:
        assert record.cleanup is not None
        raise InvalidTransition(
            "its clean-up is still undoing what it did (until "
            f"{record.cleanup.until.isoformat()}): reset once the clean-up is over"
        )
    if record.child_of is not None:
        parent = record.child_of
        raise InvalidTransition(
            f"it is a child flow of {parent.flow_id} (step {parent.step!r}): reset the parent "
            f"to {parent.step!r} to run a fresh child"
        )


def refuse_step(flow: Flow, step: str) -> None:
    """InvalidTransition unless ``step`` is a step of the flow itself."""
    if flow.index_of(step) is not None:
        return
    for each in flow.steps:
        if isinstance(each, ForEach) and each.item_flow.index_of(step) is not None:
            raise InvalidTransition(
                f"step {step!r} runs inside ForEach {each.name!r}, once per item: a reset "
                "goes to a step of the flow itself"
            )
    names = ", ".join(flow.graph.order)
    raise InvalidTransition(f"{flow.label} has no step {step!r} (its steps: {names})")


def refuse_rerun(flow: Flow, record: FlowRecord, rerun: tuple[str, ...], *, undo: bool) -> None:
    """InvalidTransition if a step that would run again is one a reset cannot run again."""
    for name in rerun:
        # Items the flow's end gathered and undid run again in lanes of their own; those a
        # succeeded flow's lanes hold are still theirs to undo.
        if isinstance(flow.named(name), ForEach) and not record.gathered:
            raise InvalidTransition(
                f"ForEach {name!r} would run again, which a reset does not do (the lanes of "
                "its earlier run hold its items): reset to a step after it"
            )
        live = record.live_effect(name)
        if not undo and live is not None and live.child is not None:
            raise InvalidTransition(
                f"child flow step {name!r} would start a fresh child while its child "
                f"{live.child} stands: reset with its effects undone"
            )


def downstream(flow: Flow, step: str) -> set[str]:
    """``step`` and every step that runs after it, directly or not."""
    found = {step}
    grown = True
    while grown:  # to a fixpoint: definition order need not be dependency order
        grown = False
        for name in flow.graph.order:
            if name not in found and found & set(flow.graph.deps[name]):
                found.add(name)
                grown = True
    return found


def owner(effect: Effect) -> str:
    """The step of the flow that made ``effect`` (a ForEach item's: the ForEach)."""
    scope, _, name = split_effect_name(effect.step)
    return scope or name


def reset(
    plan: Plan,
    record: FlowRecord,
    step: str,
    *,
    undo: bool = True,
    reason: str = "",
    by: str = "",
    bulk: str = "",
) -> FlowRecord:
    """Run the ended flow again from ``step`` as a new generation (see the module); ``reason``
    and ``by`` (the operator) are recorded on its history entry and its ``reset``, with
    ``bulk``, the bulk action it is part of."""
    scope = scope_of(plan, record, step, undo=undo)
    generation = record.position.generation + 1
    mode = "undoing what ran from it" if undo else "keeping the effects"
    detail = f"generation {generation}: reset to {step}, {mode}" + (f": {reason}" if reason else "")
    entry = new_entry(plan, record, "reset", detail=detail)
    entry = entry.model_copy(update={"by": by, "bulk": bulk})
    marker = Reset(
        step=step,
        generation=generation,
        undo=undo,
        rerun=list(scope.rerun),
        to_undo=[e.step for e in scope.undone],
        by=by,
        reason=reason[:500],
    )
    position = record.position.model_copy(update={"generation": generation})
    moved = move(plan, log(plan, record, entry, a_try=False), Status.PENDING).model_copy(
        update={"reset": marker, "position": position, **FRESH, **lanes_over(record)}
    )
    return (undo_next(plan, moved) if marker.to_undo else start_again(plan, moved)).stored()


# What a new generation starts without (as a retry's does).
FRESH: dict[str, Any] = {
    "tracks": {},
    "focus": None,
    "result": None,
    "pending_result": None,
    "result_published": False,
    "cleanup": None,
    "finished_at": None,
    "expire_at": None,
    "deadline_at": None,
    "dependency": None,  # a new run is held up by nothing yet
}


def undo_next(plan: Plan, record: FlowRecord) -> FlowRecord:
    """The reset's next undo (the newest effect left), the flow RUNNING."""
    assert record.reset is not None
    effect = record.live_effect(record.reset.to_undo[0])
    assert effect is not None  # only the reset's own undo changes what it lists
    pos = undo_position(plan, record, effect)
    return undoing(plan, record, pos, Status.RUNNING)


def start_again(plan: Plan, record: FlowRecord) -> FlowRecord:
    """The undos are over: drop the outputs of the steps that run again, and start them."""
    marker = record.reset
    assert marker is not None
    outputs = {s: out for s, out in record.outputs.items() if s not in marker.rerun}
    update = {"outputs": outputs, "skipped": skipped_by_choices(plan.flow, outputs)}
    cleared = record.model_copy(update={**update, "tracks": {}, "focus": None})
    return start_ready(plan, cleared, generation=marker.generation)


def resetting(record: FlowRecord) -> bool:
    """Whether the focused undo is a reset's (not the saga's, nor a clean-up's)."""
    return (
        record.reset is not None
        and bool(record.reset.to_undo)
        and record.status is Status.RUNNING
        and record.focus == UNDO_TRACK
        and not record.is_lane
    )


def after_undo(plan: Plan, record: FlowRecord, outcome: Outcome) -> FlowRecord:
    """An undo's outcome: the reset's while a reset undoes, the saga's otherwise."""
    if not resetting(record):
        return after_compensation(plan, record, outcome)
    again = undo_retried(plan, record, outcome)  # on the step's retry policy, as the saga's
    if again is not None:
        return again
    if not isinstance(outcome, Completed):
        return reset_failed(plan, record, outcome)
    marker = record.reset
    assert marker is not None
    name = record.position.effect_name
    record = set_effect(
        log(plan, record, new_entry(plan, record, "compensated")), name, state=EffectState.UNDONE
    )
    left = [n for n in marker.to_undo if n != name]
    record = record.model_copy(update={"reset": marker.model_copy(update={"to_undo": left})})
    return undo_next(plan, record) if left else start_again(plan, record)


def reset_failed(plan: Plan, record: FlowRecord, outcome: Outcome) -> FlowRecord:
    """An undo of the reset failed for good, or its tries are spent: the flow ends FAILED
    (``RESET_UNDO_FAILED``); that effect is ``undo_failed`` and those after it in the list
    stay as they were (a reset again, or an undo, tries them again)."""
    marker = record.reset
    assert marker is not None
    name = record.position.effect_name
    why = describe(outcome)
    if isinstance(outcome, Retry):
        why = f"its tries are spent: {why}"
    record = log(plan, record, new_entry(plan, record, "compensation failed", detail=why))
    record = set_effect(record, name, state=EffectState.UNDO_FAILED)
    message = (
        f"reset to {marker.step}: undoing {name} failed ({why}); "
        f"not undone: {', '.join(marker.to_undo)}"
    )[:2000]
    error = {
        "code": RESET_UNDO_FAILED,
        "message": message,
        "step": name,
        "reset_to": marker.step,
        "not_undone": list(marker.to_undo),
    }
    result = Result(status=Status.FAILED, code=RESET_UNDO_FAILED, message=message, error=error)
    ended = record.model_copy(update={"reset": marker.model_copy(update={"to_undo": []})})
    return finish(plan, ended, result)


def preview_reset(plan: Plan, record: FlowRecord, step: str, *, undo: bool = True) -> Preview:
    """What ``reset`` would do to ``record`` now, said before it is done (a dry run's row)."""
    detail: dict[str, Any] = {
        "step": step,
        "undo": undo,
        "status": str(record.status),
        "generation": record.position.generation + 1,
    }
    try:
        scope = scope_of(plan, record, step, undo=undo)
    except InvalidTransition as exc:
        return Preview(record.key, "reset", False, reason=str(exc), detail=detail)
    except UnknownFlow:
        why = f"no deployed version runs {record.flow!r} flows (v{record.version})"
        return Preview(record.key, "reset", False, reason=why, detail=detail)
    # Kept effects of steps that run again: each replayed under its key, not made again.
    replayed = [e.step for e in scope.kept if owner(e) in scope.rerun]
    if replayed:
        detail["replayed"] = replayed
    return Preview(
        key=record.key,
        action="reset",
        allowed=True,
        rerun=scope.rerun,
        undone=tuple(e.step for e in scope.undone),
        kept=tuple(e.step for e in scope.kept),
        detail=detail,
    )

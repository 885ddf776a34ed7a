"""An operator's operations: cancel an active flow, run an ended one again (a new
generation, keeping what is still in effect), undo again what an ended flow left live."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from relayflow.core.errors import AlreadyActed, ChangedSince, InvalidTransition
from relayflow.core.flows import Flow, ForEach
from relayflow.core.planner.claims import is_claimed
from relayflow.core.planner.cleanup import cleanup_states, cleanup_track
from relayflow.core.planner.effects import TO_UNDO, next_compensation, undo_position
from relayflow.core.planner.history import log, new_entry
from relayflow.core.planner.plan import Plan
from relayflow.core.planner.saga import compensate_next
from relayflow.core.planner.starts import start_ready
from relayflow.core.planner.states import move, stop_all
from relayflow.core.position import split_effect_name
from relayflow.core.records import Cleanup, Effect, EffectState, FlowRecord, Result
from relayflow.core.state import TERMINAL, Status, check_transition


@dataclass(frozen=True)
class BulkMark:
    """What a bulk action's operation on one flow carries: the bulk action's id (recorded on
    the flow's history entry) and the generation and status its dry run saw."""

    bulk: str
    generation: int
    status: Status


def checked(record: FlowRecord, mark: BulkMark | None) -> FlowRecord:
    """``record`` if bulk action ``mark`` may act on it now: AlreadyActed if its history has
    the bulk action's entry (a batch run again after a crash: it acted already), ChangedSince
    if it is not at the generation and status the dry run saw. Checked in the same
    compare-and-set as the operation, so two deliveries of one batch never both act."""
    if mark is None:
        return record
    if any(entry.bulk == mark.bulk for entry in record.history):
        raise AlreadyActed(f"bulk action {mark.bulk} acted on it already")
    now = (record.status, record.position.generation)
    if now != (mark.status, mark.generation):
        raise ChangedSince(
            f"changed since the dry run: {mark.status} (generation {mark.generation}) then, "
            f"{record.status} (generation {record.position.generation}) now"
        )
    return record


def cancel(
    plan: Plan, record: FlowRecord, reason: str, *, by: str = "", bulk: str = ""
) -> FlowRecord:
    """Cancel an active flow: undo its completed steps (if any can be undone), then end it
    CANCELLED. Its pending tasks become stale no-ops. ``bulk``: the bulk action it is part of,
    recorded on its history entry.

    A flow already compensating is refused: it is on its way to an end already. So is one
    with a step running a side effect: its effect could land after the undo and never be
    undone, so the step must commit first.
    """
    if record.status is Status.COMPENSATING:
        raise InvalidTransition("the flow is compensating and will end by itself")
    check_transition(record.status, Status.CANCELLED)  # an ended flow: say so plainly
    for key in record.tracks:
        running = record.focused(key)
        if is_claimed(plan, running):
            assert running.claim is not None
            raise InvalidTransition(
                f"step {running.position.step!r} is running (claimed until "
                f"{running.claim.until.isoformat()}); cancel again once it has committed"
            )
    result = Result(status=Status.CANCELLED, code="CANCELLED", message=reason)
    entry = new_entry(plan, record, "cancelled", detail=reason)
    record = log(plan, record, entry.model_copy(update={"by": by, "bulk": bulk}), a_try=False)
    return compensate_next(plan, stop_all(record), result).stored()


def restart(
    plan: Plan,
    record: FlowRecord,
    *,
    reason: str = "",
    by: str = "",
    bulk: str = "",
    delay_s: float = 0.0,
) -> FlowRecord:
    """Run a failed, timed-out or cancelled flow again, as a new generation; ``reason``,
    ``by`` (the operator) and ``bulk`` (the bulk action it is part of) are recorded on its
    history entry. Its first steps are due ``delay_s`` from now (a bulk action spreads the
    flows of a batch over the batch's time).

    It keeps the outputs of steps that are still in effect (done and not undone) and of the
    steps before them, and starts every step that is then ready: a step whose undo failed is
    not done again, one that was undone is, and so is everything that ran after it. A ForEach
    whose items were undone runs them again in lanes of the new generation.
    """
    if record.status is Status.SUCCEEDED:  # only a reset to a step runs it again
        raise InvalidTransition(
            "illegal transition SUCCEEDED -> PENDING: a retry runs a failed, timed-out or "
            "cancelled flow again (a reset to a step runs a succeeded one again)"
        )
    if record.cleaning:
        assert record.cleanup is not None
        raise InvalidTransition(
            "its clean-up is still undoing what it did (until "
            f"{record.cleanup.until.isoformat()}): retry once the clean-up is over"
        )
    kept = outputs_kept(plan, record)
    generation = record.position.generation + 1
    detail = f"generation {generation}" + (f": {reason}" if reason else "")
    entry = new_entry(plan, record, "restarted", detail=detail)
    entry = entry.model_copy(update={"by": by, "bulk": bulk})
    moved = move(plan, log(plan, record, entry, a_try=False), Status.PENDING).model_copy(
        update={
            "outputs": kept,
            "skipped": skipped_by_choices(plan.flow, kept),
            "tracks": {},
            "focus": None,
            "result": None,
            "result_published": False,
            "cleanup": None,
            "reset": None,
            "finished_at": None,
            "expire_at": None,
            "deadline_at": None,
            "dependency": None,
        }
        | lanes_over(record)
    )
    return start_ready(plan, moved, generation=generation, delay_s=delay_s)


def lanes_over(record: FlowRecord) -> dict[str, Any]:
    """What a new generation of ``record`` starts with for its ForEach lanes: none, when the
    flow's end gathered their items' effects (the ForEach runs again in lanes of its own, the
    earlier ones over and their effects the flow's); else the lanes it has."""
    return {"lanes": [], "gathered": False} if record.gathered else {}


def outputs_kept(plan: Plan, record: FlowRecord) -> dict[str, Any]:
    """Outputs that still describe the world, each kept only while everything it ran after is
    kept (a poll awaited what a redone step made)."""
    flow = plan.flow
    in_effect = outputs_in_effect(plan, record)
    kept: dict[str, Any] = {}
    changed = True
    while changed:  # to a fixpoint: definition order need not be dependency order
        changed = False
        for step in flow.graph.order:
            deps = flow.graph.deps[step]
            if step in in_effect and step not in kept and all(d in kept for d in deps):
                kept[step] = in_effect[step]
                changed = True
    return kept


def skipped_by_choices(flow: Flow, outputs: dict[str, Any]) -> list[str]:
    skipped: list[str] = []
    for choice in flow.graph.branches:
        if choice in outputs:
            skipped += flow.graph.skipped_by(choice, outputs[choice].get("branch") == "then")
    return skipped


def outputs_in_effect(plan: Plan, record: FlowRecord) -> dict[str, Any]:
    """Outputs whose step is still in effect: an action's whose effect was not undone, a
    poll's or a choice's; a ForEach's unless the flow's end gathered its items' effects to undo
    them (its output describes what is gone)."""
    flow = plan.flow

    def kept(step: str) -> bool:
        index = flow.index_of(step)
        if index is None:
            return False
        if isinstance(flow.step(index), ForEach):
            return not record.gathered
        if not plan.kinds.of(flow.step(index)).makes_effects:
            return True
        effect = record.live_effect(step)
        return effect is not None and effect.state is not EffectState.UNKNOWN

    return {step: out for step, out in record.outputs.items() if kept(step)}


def undone_again(record: FlowRecord, effect: Effect) -> bool:
    """Whether an operator's undo again covers ``effect``: any that may be live, of a flow
    that did not succeed; of one that did, only a failed ForEach item's whose undo was left
    or given up (what its own steps did is its result, and stays)."""
    if record.status is not Status.SUCCEEDED:
        return effect.state in (*TO_UNDO, EffectState.UNDO_FAILED)
    undoing = (EffectState.UNDO_PENDING, EffectState.UNDO_FAILED)
    return effect.state in undoing and split_effect_name(effect.step)[0] is not None


def undoable(record: FlowRecord) -> list[Effect]:
    """What an operator's undo again would undo now (nothing while a clean-up runs)."""
    if record.status not in TERMINAL or record.cleaning:
        return []
    return [e for e in record.effects if undone_again(record, e)]


def undo_again(plan: Plan, record: FlowRecord, reason: str, *, by: str = "") -> FlowRecord:
    """An operator's undo of what an ended flow left live (a clean-up given up, an undo that
    failed for good): a new clean-up round with a fresh window."""
    if record.status not in TERMINAL:
        raise InvalidTransition(f"the flow is {record.status}: it has not ended")
    if record.cleaning:
        assert record.cleanup is not None
        raise InvalidTransition(
            f"its clean-up is still undoing effects (until {record.cleanup.until.isoformat()})"
        )
    redo = [e for e in record.effects if undone_again(record, e)]
    record = record.model_copy(
        update={
            "effects": [
                e.model_copy(update={"state": EffectState.UNDO_PENDING})
                if e.state is EffectState.UNDO_FAILED and undone_again(record, e)
                else e
                for e in record.effects
            ]
        }
    )
    states = cleanup_states(record)
    first = next_compensation(plan, record, item=None, states=states) if redo else None
    if first is None:
        raise InvalidTransition("nothing is left to undo: every effect it made was undone")
    entry = new_entry(plan, record, "undo requested", detail=reason).model_copy(update={"by": by})
    record = log(plan, record, entry, a_try=False)
    rounds = 1 + max((e.position.undo_round for e in record.tracks.values()), default=0)
    rounds = max(rounds, record.position.undo_round + 1)
    window = timedelta(seconds=plan.undo_window_s or 24 * 3600.0)
    cleanup = Cleanup(since=plan.now, until=plan.now + window, reason=reason, by=by)
    pos = undo_position(plan, record, first, undo_round=rounds)
    return cleanup_track(plan, record.model_copy(update={"cleanup": cleanup}), pos, 0.0).stored()

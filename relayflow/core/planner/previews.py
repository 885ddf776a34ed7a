"""What an operator's action would do to one flow, said before it is done: a dry run's row.

Every operation that can run over many flows (retry, cancel, reset to a step) has a preview
built from the same planner functions as the operation itself, so what a dry run lists is what
the action then does. A preview is pure: a flow's document and its definition in, a
``Preview`` out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from relayflow.core.errors import InvalidTransition, UnknownFlow
from relayflow.core.flows import ForEach
from relayflow.core.planner.effects import undo_order
from relayflow.core.planner.operations import cancel, restart
from relayflow.core.planner.plan import Plan
from relayflow.core.records import Effect, FlowRecord
from relayflow.core.state import TERMINAL, Status


@dataclass(frozen=True)
class Preview:
    """What ``action`` would do to the flow ``key`` now.

    ``allowed`` is False (and ``reason`` says why) when the action would be refused, e.g. a
    retry of a flow that is still running. Effects are named by the step that made them (a
    ForEach item's as ``step[item]``), newest first where order matters: ``undone`` in the
    order the undos would run.
    """

    key: str
    action: str
    allowed: bool
    reason: str = ""
    rerun: tuple[str, ...] = ()  # steps that would run (again), in definition order
    undone: tuple[str, ...] = ()  # effects that would be undone, newest first
    kept: tuple[str, ...] = ()  # effects that would stay live
    detail: dict[str, Any] = field(default_factory=dict)  # the action's own facts

    def as_json(self) -> dict[str, Any]:
        """The preview as the api, the CLI and the console show it."""
        return {
            "key": self.key,
            "action": self.action,
            "allowed": self.allowed,
            "reason": self.reason,
            "rerun": list(self.rerun),
            "undone": list(self.undone),
            "kept": list(self.kept),
            **({"detail": self.detail} if self.detail else {}),
        }


def preview_retry(plan: Plan, record: FlowRecord) -> Preview:
    """What a retry (``operations.restart``) would do to ``record`` now: run as a new
    generation every step whose output it does not keep, undo nothing, and keep every effect
    that may be live (one whose step runs again is found again under its idempotency key,
    not made twice)."""
    refused = _refusal(record, "retry")
    if refused is not None:
        return refused
    try:
        restarted = restart(plan, record)
    except (InvalidTransition, UnknownFlow) as exc:
        return Preview(record.key, "retry", allowed=False, reason=_said(exc, record))
    over = set(restarted.outputs) | set(restarted.skipped)
    rerun = tuple(step for step in plan.flow.graph.order if step not in over)
    generation = restarted.position.generation
    detail: dict[str, Any] = {"generation": generation}
    again = [s for s in rerun if isinstance(plan.flow.named(s), ForEach)]
    if again and record.gathered:
        names = ", ".join(again)
        detail["items"] = (
            f"ForEach {names} runs its items again, in lanes of generation {generation}"
        )
    return Preview(
        key=record.key,
        action="retry",
        allowed=True,
        rerun=rerun,
        kept=tuple(e.step for e in _newest_first(record.effects) if e.state.live),
        detail=detail,
    )


def preview_cancel(plan: Plan, record: FlowRecord) -> Preview:
    """What a cancel (``operations.cancel``) would do to ``record`` now: undo, newest first,
    every effect that may be live and has a compensation (the saga's order), keep the rest,
    and run nothing again. A flow whose type is not deployed undoes nothing."""
    refused = _refusal(record, "cancel")
    if refused is not None:
        return refused
    try:
        cancel(plan, record, "")
    except InvalidTransition as exc:
        return Preview(record.key, "cancel", allowed=False, reason=_said(exc, record))
    undone = list(undo_order(plan, record)) if plan.definition is not None else []
    names = {e.step for e in undone}
    detail: dict[str, Any] = {}
    if record.lanes and not record.gathered:
        detail["items"] = "its ForEach items' effects are gathered, then undone with these"
    if plan.definition is None:
        detail["undeployed"] = "no deployed version runs it: nothing can be undone"
    return Preview(
        key=record.key,
        action="cancel",
        allowed=True,
        undone=tuple(e.step for e in undone),
        kept=tuple(
            e.step for e in _newest_first(record.effects) if e.state.live and e.step not in names
        ),
        detail=detail,
    )


def _refusal(record: FlowRecord, action: str) -> Preview | None:
    """The plain reason an action is refused for the flow's status, said as an operator reads
    it (the planner's own refusal says ``illegal transition``)."""
    if action == "retry" and record.status not in TERMINAL:
        why = f"it is {record.status}: only an ended flow is retried"
    elif action == "retry" and record.status is Status.SUCCEEDED:
        why = "it SUCCEEDED: a retry runs only a failed, timed-out or cancelled flow"
    elif action == "cancel" and record.status in TERMINAL:
        why = f"it has ended ({record.status}): only an active flow is cancelled"
    else:
        return None
    return Preview(record.key, action, allowed=False, reason=why)


def _said(exc: Exception, record: FlowRecord) -> str:
    if isinstance(exc, UnknownFlow):
        return f"no deployed version runs {record.flow!r} flows"
    return str(exc)


def _newest_first(effects: list[Effect]) -> list[Effect]:
    return sorted(effects, key=lambda e: e.order, reverse=True)

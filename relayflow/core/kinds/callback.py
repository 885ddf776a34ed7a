"""Callback steps: run once like an action, then wait for the token it handed out to be
completed (``POST /callbacks``, ``flow-signals``), with an optional safety-net poll."""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from relayflow.core.errors import NotReady
from relayflow.core.flows import CallbackStep, Handler, Step, StepContext
from relayflow.core.kinds.base import Kind, Wrap
from relayflow.core.position import Position, TaskKind


class Callback(Kind):
    step_type: ClassVar[type] = CallbackStep
    name: ClassVar[str] = "callback"
    forward: ClassVar[TaskKind] = TaskKind.ACTION
    tasks: ClassVar[frozenset[TaskKind]] = frozenset(
        {TaskKind.ACTION, TaskKind.WAIT, TaskKind.COMPENSATE}
    )
    claimed: ClassVar[frozenset[TaskKind]] = frozenset({TaskKind.ACTION, TaskKind.COMPENSATE})
    waiting: ClassVar[frozenset[TaskKind]] = frozenset({TaskKind.WAIT})

    def handler(self, step: Step, task: TaskKind) -> Handler | None:
        assert isinstance(step, CallbackStep)
        if task is TaskKind.COMPENSATE:
            return step.compensate
        if task is TaskKind.WAIT:
            return step.check or no_callback_yet
        return step.run

    def compensation(self, step: Step) -> Handler | None:
        assert isinstance(step, CallbackStep)
        return step.compensate

    def fits(self, step: Step, position: Position) -> str:
        changed = super().fits(step, position)
        if changed or position.kind is not TaskKind.COMPENSATE or self.compensation(step):
            return changed
        return f"step {step.name!r} no longer has a compensation"

    def describe(self, step: Step) -> str:
        assert isinstance(step, CallbackStep)
        net = "with a safety-net poll" if step.check else "no safety net"
        return f"callback, timeout {step.timeout_s:g}s, {net}"

    def wrapped(self, step: Step, wrap: Wrap) -> Step:
        assert isinstance(step, CallbackStep)
        check, undo = step.check, step.compensate
        return replace(
            step,
            run=wrap(step.name, TaskKind.ACTION, step.run),
            check=None if check is None else wrap(step.name, TaskKind.WAIT, check),
            compensate=None if undo is None else wrap(step.name, TaskKind.COMPENSATE, undo),
        )

    def scripted(self, step: Step, role: str, handler: Handler) -> Step:
        assert isinstance(step, CallbackStep)
        return replace(step, run=handler) if role == "run" else replace(step, compensate=handler)


def no_callback_yet(ctx: StepContext) -> None:
    """A callback step without a safety net, at its timeout: still waiting means timed out."""
    raise NotReady("no callback yet")

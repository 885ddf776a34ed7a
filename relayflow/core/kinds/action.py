"""Action steps: do something once (with retries), optionally undone by ``compensate``."""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from relayflow.core.flows import ActionStep, Handler, Step
from relayflow.core.kinds.base import Kind, Wrap
from relayflow.core.position import Position, TaskKind


class Action(Kind):
    step_type: ClassVar[type] = ActionStep
    name: ClassVar[str] = "action"
    forward: ClassVar[TaskKind] = TaskKind.ACTION
    tasks: ClassVar[frozenset[TaskKind]] = frozenset({TaskKind.ACTION, TaskKind.COMPENSATE})
    claimed: ClassVar[frozenset[TaskKind]] = frozenset({TaskKind.ACTION, TaskKind.COMPENSATE})

    def handler(self, step: Step, task: TaskKind) -> Handler | None:
        assert isinstance(step, ActionStep)
        if task is TaskKind.COMPENSATE:
            return step.compensate
        return step.run

    def compensation(self, step: Step) -> Handler | None:
        assert isinstance(step, ActionStep)
        return step.compensate

    def fits(self, step: Step, position: Position) -> str:
        changed = super().fits(step, position)
        if changed or position.kind is not TaskKind.COMPENSATE or self.compensation(step):
            return changed
        return f"step {step.name!r} no longer has a compensation"

    def next_try_s(self, step: Step, position: Position, key: str) -> float:
        # Each time it was put off counts as a try on the curve: with no breaker, each of
        # those would have been a call that failed, and the curve would have moved on.
        assert isinstance(step, ActionStep)
        tried = max(0, position.attempt - 1 + position.deferral)
        delay: float = step.retry.delay_s(retry=tried, key=key)
        return delay

    def wrapped(self, step: Step, wrap: Wrap) -> Step:
        assert isinstance(step, ActionStep)
        undo = step.compensate
        return replace(
            step,
            run=wrap(step.name, TaskKind.ACTION, step.run),
            compensate=None if undo is None else wrap(step.name, TaskKind.COMPENSATE, undo),
        )

    def scripted(self, step: Step, role: str, handler: Handler) -> Step:
        assert isinstance(step, ActionStep)
        return replace(step, run=handler) if role == "run" else replace(step, compensate=handler)

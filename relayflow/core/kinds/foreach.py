"""ForEach steps: a small flow of item steps, run once per item in lanes of their own."""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from relayflow.core.flows import Flow, ForEach, Handler, Step
from relayflow.core.kinds.base import Kind, Wrap
from relayflow.core.position import TaskKind


class Items(Kind):
    step_type: ClassVar[type] = ForEach
    name: ClassVar[str] = "foreach"
    forward: ClassVar[TaskKind] = TaskKind.FANOUT
    # The engine's own tasks: list the items and start the lanes, join their outputs, and
    # gather their effects before undoing.
    tasks: ClassVar[frozenset[TaskKind]] = frozenset(
        {TaskKind.FANOUT, TaskKind.JOIN, TaskKind.GATHER}
    )

    own: ClassVar[frozenset[TaskKind]] = tasks

    def handler(self, step: Step, task: TaskKind) -> Handler | None:
        return None  # the engine runs a ForEach's tasks itself

    def inner(self, step: Step) -> Flow | None:
        assert isinstance(step, ForEach)
        return step.item_flow

    def describe(self, step: Step) -> str:
        assert isinstance(step, ForEach)
        return f"for each item, {step.concurrency} at a time, tolerating {step.tolerate}"

    def wrapped(self, step: Step, wrap: Wrap) -> Step:
        raise AssertionError("a ForEach's item steps are wrapped one by one")

    def with_steps(self, step: Step, steps: tuple[Step, ...]) -> Step:
        """``step`` with other item steps (the harness wraps or scripts them)."""
        assert isinstance(step, ForEach)
        return replace(step, steps=steps)  # type: ignore[arg-type]

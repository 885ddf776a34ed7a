"""If steps: a condition, with no side effect, picks the branch that runs."""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any, ClassVar

from relayflow.core.errors import PermanentError
from relayflow.core.flows import Handler, IfStep, Step, StepContext
from relayflow.core.kinds.base import Kind, Wrap
from relayflow.core.planner.forward import advance, fail
from relayflow.core.planner.plan import Plan, Retry, Waiting
from relayflow.core.position import TaskKind
from relayflow.core.records import FlowRecord


class Choice(Kind):
    step_type: ClassVar[type] = IfStep
    name: ClassVar[str] = "if"
    forward: ClassVar[TaskKind] = TaskKind.CHOICE
    tasks: ClassVar[frozenset[TaskKind]] = frozenset({TaskKind.CHOICE})

    def handler(self, step: Step, task: TaskKind) -> Handler | None:
        assert isinstance(step, IfStep)
        return functools.partial(choose, step)

    def done(self, plan: Plan, record: FlowRecord, output: dict[str, Any]) -> FlowRecord:
        """The branch not picked is skipped, with every step only it leads to."""
        step = record.position.step
        skipped = plan.flow.graph.skipped_by(step, output.get("branch") == "then")
        record = record.model_copy(update={"skipped": [*record.skipped, *skipped]})
        return advance(plan, record, output, seen=f"chose {output.get('branch')}")

    def again(self, plan: Plan, record: FlowRecord, outcome: Retry | Waiting) -> FlowRecord:
        """A condition that raised fails the flow: it reads only the input and the outputs, so
        a retry would raise again (and an If has no retry policy to bound one)."""
        raised = outcome.error.message if isinstance(outcome, Retry) else "it said not ready"
        message = f"the condition of {record.position.step!r} raised: {raised}"
        return fail(plan, record, PermanentError(message, code="CONDITION_FAILED"))

    def describe(self, step: Step) -> str:
        assert isinstance(step, IfStep)
        return (
            f"if: then {', '.join(step.then) or '-'}; otherwise {', '.join(step.otherwise) or '-'}"
        )

    def wrapped(self, step: Step, wrap: Wrap) -> Step:
        assert isinstance(step, IfStep)
        return replace(step, condition=wrap(step.name, TaskKind.CHOICE, step.condition))


def choose(step: IfStep, ctx: StepContext) -> dict[str, Any]:
    """A choice's output: which branch its condition picked."""
    picked = step.condition(ctx)
    if not isinstance(picked, bool):
        raise PermanentError(
            f"the condition of {step.name!r} returned a {type(picked).__name__}, not a bool",
            code="INVALID_OUTPUT",
        )
    return {"branch": "then" if picked else "otherwise"}

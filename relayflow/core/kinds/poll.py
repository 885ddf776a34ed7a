"""Poll steps: check an external operation until it is done (``check`` raises NotReady)."""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from relayflow.core.flows import Handler, PollPolicy, PollStep, Step
from relayflow.core.kinds.base import Kind, Wrap
from relayflow.core.position import Position, TaskKind


class Poll(Kind):
    step_type: ClassVar[type] = PollStep
    name: ClassVar[str] = "poll"
    forward: ClassVar[TaskKind] = TaskKind.POLL
    tasks: ClassVar[frozenset[TaskKind]] = frozenset({TaskKind.POLL})
    waiting: ClassVar[frozenset[TaskKind]] = frozenset({TaskKind.POLL})

    def handler(self, step: Step, task: TaskKind) -> Handler | None:
        assert isinstance(step, PollStep)
        return step.check

    def retries(self, task: TaskKind) -> bool:
        return False  # a poll after a failed poll is the poll the schedule makes anyway

    def next_try_s(self, step: Step, position: Position, key: str) -> float:
        assert isinstance(step, PollStep)
        return step.policy.delay_s(n=position.poll + position.deferral, key=key)

    def policy(self, step: Step) -> PollPolicy:
        """Its backoff (the console draws each wait against it)."""
        assert isinstance(step, PollStep)
        return step.policy

    def wrapped(self, step: Step, wrap: Wrap) -> Step:
        assert isinstance(step, PollStep)
        return replace(step, check=wrap(step.name, TaskKind.POLL, step.check))

    def scripted(self, step: Step, role: str, handler: Handler) -> Step:
        assert isinstance(step, PollStep)
        if role != "run":
            raise AssertionError(f"poll step {step.name!r} has no compensation to script")
        return replace(step, check=handler)

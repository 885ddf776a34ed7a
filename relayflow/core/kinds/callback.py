"""Callback steps: run once like an action, then wait for the token it handed out to be
completed (``POST /callbacks``, ``flow-signals``), with an optional safety-net poll.

Also the planner's side of it: await the callback once the run has committed, and end the
step with the completion (``signal``), kept until then if it comes first."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any, ClassVar

from relayflow.core.backoff import clip_to_deadline
from relayflow.core.errors import NotReady, PermanentError
from relayflow.core.flows import CallbackStep, Handler, RetryPolicy, Step, StepContext
from relayflow.core.kinds.action import retried
from relayflow.core.kinds.base import Kind, Wrap
from relayflow.core.kinds.poll import poll_again, poll_deadline, wait_deadline
from relayflow.core.planner.chain import chain_end, due_at_chain_end
from relayflow.core.planner.effects import effect_done
from relayflow.core.planner.forward import advance, after, follow
from relayflow.core.planner.history import log, new_entry
from relayflow.core.planner.plan import (
    Completed,
    Failed,
    Outcome,
    Plan,
    Retry,
    Waiting,
    schedule,
    step_of,
)
from relayflow.core.planner.states import move, with_next
from relayflow.core.position import Position, TaskKind
from relayflow.core.records import FlowRecord
from relayflow.core.state import Status


class Callback(Kind):
    step_type: ClassVar[type] = CallbackStep
    name: ClassVar[str] = "callback"
    forward: ClassVar[TaskKind] = TaskKind.ACTION
    tasks: ClassVar[frozenset[TaskKind]] = frozenset(
        {TaskKind.ACTION, TaskKind.WAIT, TaskKind.COMPENSATE}
    )
    claimed: ClassVar[frozenset[TaskKind]] = frozenset({TaskKind.ACTION, TaskKind.COMPENSATE})
    waiting: ClassVar[frozenset[TaskKind]] = frozenset({TaskKind.WAIT})
    hands_token: ClassVar[bool] = True

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

    def retry(self, step: Step) -> RetryPolicy | None:
        assert isinstance(step, CallbackStep)
        return step.retry

    def deadline(self, plan: Plan, record: FlowRecord) -> datetime:
        step = step_of(plan, record.position)
        assert isinstance(step, CallbackStep)
        return wait_deadline(record, step.timeout_s)

    def done(self, plan: Plan, record: FlowRecord, output: dict[str, Any]) -> FlowRecord:
        if record.position.kind is TaskKind.WAIT:  # completed (or its safety net said done)
            return advance(plan, record, output, seen="completed")
        record = effect_done(plan, record, record.position.effect_name, output)
        return await_callback(plan, record, output)

    def again(self, plan: Plan, record: FlowRecord, outcome: Retry | Waiting) -> FlowRecord:
        if record.position.kind is not TaskKind.WAIT:  # its run: retried like an action's
            return retried(plan, record, outcome)
        step = step_of(plan, record.position)
        assert isinstance(step, CallbackStep)
        # Bounded by its timeout alone; with no safety net, its next task is the timeout.
        net = step.check is not None
        return poll_again(plan, record, outcome, policy=step.policy, max_polls=None, net=net)

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


def await_callback(plan: Plan, record: FlowRecord, sent: dict[str, Any]) -> FlowRecord:
    """A callback step's run has committed: the step now waits for its token to be completed,
    with its next task the safety-net poll (if it has a check) or the timeout."""
    key = record.focus
    assert key is not None
    step = plan.flow.named(record.position.step)
    assert isinstance(step, CallbackStep)
    record = log(plan, record, new_entry(plan, record, "sent; waiting for the callback"))
    wait = record.position.model_copy(update={"kind": TaskKind.WAIT, "attempt": 0, "poll": 0})
    early = record.tracks[key].early
    tracks = {**record.tracks, key: record.tracks[key].model_copy(update={"sent": sent})}
    moved = move(plan, record, Status.RUNNING).model_copy(
        update={"tracks": tracks, "position": wait, "step_started_at": plan.now, "poll_errors": 0}
    )
    if early is not None:  # the completion came before the run had committed
        return follow(plan, moved, signal_outcome(early))
    first = step.policy.delay_s(n=0, key=f"{record.flow_id}:{step.name}") if step.check else None
    remaining = (poll_deadline(plan, moved) - plan.now).total_seconds()
    delay = clip_to_deadline(first if first is not None else remaining, remaining_s=remaining)
    task = schedule(plan, moved, wait, delay if delay is not None else 0.0)
    if step.check is None:  # its one task is the timeout
        return with_next(moved, task)
    # Its safety-net polls run as a chain (``planner.chain``): due when the chain's first
    # write is.
    due = poll_deadline(plan, moved)
    end = chain_end(
        moved, task, policy=step.policy, max_polls=None, deadline=due, chain=plan.poll_chain
    )
    return due_at_chain_end(with_next(moved, task), end)


def signal(plan: Plan, record: FlowRecord, completion: dict[str, Any]) -> FlowRecord:
    """A callback token was completed with ``completion`` (``{"output": {...}}`` or
    ``{"error": {"code", "message"}}``): the focused callback step ends with it, or, if its
    run has not committed yet, keeps it until it has."""
    if record.position.kind is TaskKind.WAIT:
        return after(plan, record, signal_outcome(completion))
    key = record.focus
    assert key is not None
    early = record.tracks[key].model_copy(update={"early": completion})
    return record.model_copy(update={"tracks": {**record.tracks, key: early}}).stored()


def signal_outcome(completion: dict[str, Any]) -> Outcome:
    """What a completion says: the step's output, or its failure."""
    error = completion.get("error")
    if isinstance(error, dict):
        message = str(error.get("message") or "the callback reported a failure")
        return Failed(PermanentError(message, code=str(error.get("code") or "CALLBACK_ERROR")))
    return Completed(dict(completion.get("output") or {}))

"""Action steps: do something once (with retries), optionally undone by ``compensate``.

Also the planner's retrying of a task that may not wait (a callback step's run too): try
again on the step's retry policy, from the dependency's recent latency if it is adaptive."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any, ClassVar

from relayflow.core.errors import RetryableError
from relayflow.core.flows import ActionStep, EffectStep, Handler, RetryPolicy, Step
from relayflow.core.kinds.base import Kind, Wrap
from relayflow.core.planner.effects import effect_done
from relayflow.core.planner.forward import advance, misused
from relayflow.core.planner.history import error_of, log, new_entry, timeout_of
from relayflow.core.planner.plan import MAX_RETRY_AFTER_S, Plan, Retry, Waiting, schedule, step_of
from relayflow.core.planner.saga import begin_failure
from relayflow.core.planner.states import move, past_deadline, with_next
from relayflow.core.position import Position, TaskKind
from relayflow.core.records import FlowRecord
from relayflow.core.state import Status


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

    def retry(self, step: Step) -> RetryPolicy | None:
        assert isinstance(step, ActionStep)
        return step.retry

    def done(self, plan: Plan, record: FlowRecord, output: dict[str, Any]) -> FlowRecord:
        record = effect_done(plan, record, record.position.effect_name, output)
        return advance(plan, record, output, seen="succeeded")

    def again(self, plan: Plan, record: FlowRecord, outcome: Retry | Waiting) -> FlowRecord:
        return retried(plan, record, outcome)

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


def retried(plan: Plan, record: FlowRecord, outcome: Retry | Waiting) -> FlowRecord:
    """A task that may not wait: a retryable error is tried again, not ready is a misuse."""
    if isinstance(outcome, Retry):
        return retry_action(plan, record, outcome.error)
    return misused(plan, record)


def retry_action(plan: Plan, record: FlowRecord, error: RetryableError) -> FlowRecord:
    """Try the focused task again after its backoff (at least the Retry-After asked), unless
    its tries are spent or the flow's deadline passes first."""
    pos = record.position
    step = step_of(plan, pos)
    assert isinstance(step, EffectStep)
    tries = pos.attempt + 1 + record.uncommitted  # crashed deliveries count too
    if tries >= step.retry.max_attempts:
        err = error_of(record, error, code="RETRIES_EXHAUSTED")
        err["message"] = f"{tries} attempts failed; last: {error.message}"
        return begin_failure(plan, record, Status.FAILED, err, "retries exhausted")
    delay = step.retry.delay_s(
        retry=pos.attempt,
        key=f"{record.flow_id}:{pos.step}:retry",
        initial_s=adaptive_start(plan, step),
    )
    delay = max(delay, min(error.retry_after_s or 0.0, MAX_RETRY_AFTER_S))
    if past_deadline(plan, record, plan.now + timedelta(seconds=delay)):
        err = timeout_of(
            record, "DEADLINE_EXCEEDED", f"the flow's deadline passes before retry {tries}"
        )
        return begin_failure(plan, record, Status.TIMED_OUT, err, "retryable error")
    entry = new_entry(plan, record, "retryable error", detail=error.message, delay_s=delay)
    nxt = pos.model_copy(update={"attempt": pos.attempt + 1, "deferral": 0})
    moved = move(plan, log(plan, record, entry), Status.RUNNING).model_copy(
        update={"position": nxt}
    )
    return with_next(moved, schedule(plan, moved, nxt, delay))


def adaptive_start(plan: Plan, step: EffectStep) -> float | None:
    """Where an adaptive retry curve starts: the dependency's recent p95 latency, if known
    and longer than the policy's own start (None: the policy's start)."""
    dependency = getattr(step, "dependency", None)
    if not step.retry.adaptive or dependency is None or plan.p95_s is None:
        return None
    p95 = plan.p95_s(dependency)
    return max(p95, step.retry.initial_s) if p95 else None

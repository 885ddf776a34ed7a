"""Poll steps: check an external operation until it is done (``check`` raises NotReady).

Also the planner's waiting, which a callback step's wait shares: poll again on the step's
backoff, and stop at its deadline. Polls run as chains (``core.planner.chain``): what
``poll_again`` plans is written only at a chain's checkpoints, and a checkpoint's record says
when the chain's last poll is due, so the sweeper does not take a healthy chain for a lost one."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import ClassVar

from relayflow.core.backoff import clip_to_deadline
from relayflow.core.flows import Handler, PollPolicy, PollStep, Step
from relayflow.core.kinds.base import Kind, Wrap
from relayflow.core.planner.chain import chain_end, due_at_chain_end
from relayflow.core.planner.history import error_of, log, new_entry, seen_in, timeout_of
from relayflow.core.planner.plan import (
    MAX_RETRY_AFTER_S,
    Outcome,
    Plan,
    Retry,
    Waiting,
    schedule,
    step_of,
)
from relayflow.core.planner.saga import begin_failure
from relayflow.core.planner.states import move, with_next
from relayflow.core.position import Position, TaskKind
from relayflow.core.records import FlowRecord
from relayflow.core.state import Status


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

    def policy(self, step: Step) -> PollPolicy | None:
        assert isinstance(step, PollStep)
        return step.policy

    def deadline(self, plan: Plan, record: FlowRecord) -> datetime:
        step = step_of(plan, record.position)
        assert isinstance(step, PollStep)
        return wait_deadline(record, step.policy.deadline_s)

    def again(self, plan: Plan, record: FlowRecord, outcome: Retry | Waiting) -> FlowRecord:
        step = step_of(plan, record.position)
        assert isinstance(step, PollStep)
        return poll_again(
            plan, record, outcome, policy=step.policy, max_polls=step.policy.max_polls
        )

    def wrapped(self, step: Step, wrap: Wrap) -> Step:
        assert isinstance(step, PollStep)
        return replace(step, check=wrap(step.name, TaskKind.POLL, step.check))

    def scripted(self, step: Step, role: str, handler: Handler) -> Step:
        assert isinstance(step, PollStep)
        if role != "run":
            raise AssertionError(f"poll step {step.name!r} has no compensation to script")
        return replace(step, check=handler)


def wait_deadline(record: FlowRecord, limit_s: float) -> datetime:
    """When a wait of at most ``limit_s`` that began with the focused step must stop: then,
    or at the flow's deadline, if sooner."""
    assert record.step_started_at is not None, "poll_deadline() needs a focused record"
    own = record.step_started_at + timedelta(seconds=limit_s)
    return min(own, record.deadline_at) if record.deadline_at else own


def poll_deadline(plan: Plan, record: FlowRecord) -> datetime:
    """When polling (or waiting for a callback) must stop: the step's own deadline or the
    flow's, if sooner."""
    return plan.kinds.at(plan.flow, record.position).deadline(plan, record)


def poll_again(
    plan: Plan,
    record: FlowRecord,
    outcome: Outcome,
    *,
    policy: PollPolicy,
    max_polls: int | None,
    net: bool = True,
) -> FlowRecord:
    """Wait on ``policy``'s backoff and check again, up to ``max_polls`` not-ready answers
    (None: bounded by the deadline alone); with no safety ``net`` (a callback step without a
    check), the next task is the deadline itself."""
    pos = record.position
    seen, hint = seen_in(outcome)
    failing = isinstance(outcome, Retry)
    poll_errors = record.poll_errors + (1 if failing else 0)
    # Retryable errors (a 429 asking to slow down, above all) are bounded by the deadline, not
    # by a count: only not-ready answers use up max_polls.
    if max_polls is not None and not failing and pos.poll + 1 - poll_errors >= max_polls:
        err = timeout_of(record, "MAX_POLLS_EXCEEDED", f"not ready after {max_polls} polls")
        return begin_failure(plan, record, Status.TIMED_OUT, err, seen)
    remaining = (poll_deadline(plan, record) - plan.now).total_seconds()
    # No safety net: the next task is the deadline.
    curve = policy.delay_s(n=pos.poll, key=f"{record.flow_id}:{pos.step}") if net else remaining
    wanted = max(curve, min(hint or 0.0, MAX_RETRY_AFTER_S))
    delay = clip_to_deadline(wanted, remaining_s=remaining)  # the last wait lands on it
    if delay is None:
        return poll_deadline_reached(plan, record, outcome, seen)
    entry = new_entry(plan, record, seen, delay_s=delay)
    errors_in_a_row = pos.attempt + 1 if failing else 0
    nxt = pos.model_copy(update={"poll": pos.poll + 1, "attempt": errors_in_a_row, "deferral": 0})
    moved = move(plan, log(plan, record, entry), Status.RUNNING).model_copy(
        update={"position": nxt, "poll_errors": poll_errors}
    )
    task = schedule(plan, moved, nxt, delay)
    due = poll_deadline(plan, record)
    end = (
        chain_end(
            moved, task, policy=policy, max_polls=max_polls, deadline=due, chain=plan.poll_chain
        )
        if net
        else None
    )
    # The flow is due (for the sweeper) when its chain's next write is, not its next poll.
    return due_at_chain_end(with_next(moved, task), end)


def poll_deadline_reached(
    plan: Plan, record: FlowRecord, outcome: Outcome, seen: str
) -> FlowRecord:
    """TIMED_OUT if the operation was simply not ready; FAILED if the check itself kept
    failing (a broken endpoint is not a slow operation)."""
    if isinstance(outcome, Retry):
        err = error_of(record, outcome.error, code="POLL_ERRORS")
        err["message"] = f"the check still failed at the deadline; last: {outcome.error.message}"
        return begin_failure(plan, record, Status.FAILED, err, seen)
    if record.position.kind is TaskKind.WAIT:
        err = timeout_of(record, "CALLBACK_TIMEOUT", "no callback came before the timeout")
        return begin_failure(plan, record, Status.TIMED_OUT, err, seen)
    err = timeout_of(record, "DEADLINE_EXCEEDED", f"not ready by the deadline ({seen})")
    return begin_failure(plan, record, Status.TIMED_OUT, err, seen)

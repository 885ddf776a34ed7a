"""What a flow does next: pure functions from (definition, record, outcome, now) to a new record.

No I/O here. The engine reads the record, runs a handler, asks the planner for the next record,
and commits it in a transaction; everything about backoff, deadlines, retries, compensation and
results is decided in this module and unit-tested with a fixed clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from relayflow.core.backoff import clip_to_deadline
from relayflow.core.errors import (
    InvalidTransition,
    NotReady,
    PermanentError,
    RetryableError,
    UnknownFlow,
)
from relayflow.core.flows import ActionStep, Flow, PollStep
from relayflow.core.position import Position, TaskKind, task_id
from relayflow.core.records import (
    Claim,
    Effect,
    EffectState,
    FlowRecord,
    HistoryEntry,
    NextTask,
    Result,
)
from relayflow.core.state import TERMINAL, Status, check_transition, path_to

MAX_SCHEDULE_AHEAD_S = 29 * 24 * 3600.0  # a day inside Cloud Tasks' 30-day limit
# A Retry-After is honoured up to an hour: one header must not park a flow for weeks.
MAX_RETRY_AFTER_S = 3600.0


@dataclass(frozen=True)
class QueueNames:
    """Which Cloud Tasks queue serves which kind of task."""

    steps: str = "flow-steps"
    polls: str = "flow-polls"

    def for_kind(self, kind: TaskKind) -> str:
        return self.polls if kind is TaskKind.POLL else self.steps


@dataclass(frozen=True)
class Completed:
    """The handler returned an output."""

    output: dict[str, Any]


@dataclass(frozen=True)
class Retry:
    """The handler raised a retryable error."""

    error: RetryableError


@dataclass(frozen=True)
class Failed:
    """The handler raised a permanent error."""

    error: PermanentError


@dataclass(frozen=True)
class Waiting:
    """A poll's check said not ready."""

    signal: NotReady


Outcome = Completed | Retry | Failed | Waiting


@dataclass(frozen=True)
class Plan:
    """Inputs every planning function shares.

    ``definition`` is None when the flow's type is not deployed at all: then only what needs
    no definition can be planned (ending the flow, cancelling it without undoing anything).
    """

    definition: Flow | None
    queues: QueueNames
    now: datetime
    history_limit: int = 200
    # How long a finished flow's document is kept (Firestore TTL on expire_at deletes it).
    retention_s: float = 30 * 24 * 3600.0

    @property
    def flow(self) -> Flow:
        """The definition; UnknownFlow if the flow's type is not deployed."""
        if self.definition is None:
            raise UnknownFlow("the flow's type is not deployed")
        return self.definition


def kind_of(flow: Flow, index: int) -> TaskKind:
    """The task kind that runs step ``index`` forward."""
    return TaskKind.POLL if isinstance(flow.step(index), PollStep) else TaskKind.ACTION


def schedule(plan: Plan, record: FlowRecord, position: Position, delay_s: float) -> NextTask:
    """The next task for ``position``, due ``delay_s`` from now (capped at what Cloud Tasks takes).

    Cloud Tasks refuses a schedule_time more than 30 days ahead; an absurd Retry-After must
    not make the enqueue fail after the transition was committed.
    """
    delay_s = min(max(delay_s, 0.0), MAX_SCHEDULE_AHEAD_S)
    return NextTask(
        queue=plan.queues.for_kind(position.kind),
        task_id=task_id(record.flow_id, position),
        run_at=plan.now + timedelta(seconds=delay_s),
        position=position,
    )


def new_record(
    plan: Plan,
    *,
    flow_id: str,
    input: dict[str, Any],
    message_id: str | None,
    deadline_s: float | None,
) -> FlowRecord:
    """A PENDING flow at its first step, with its first task due now."""
    position = Position(step_index=0, step=plan.flow.step(0).name, kind=kind_of(plan.flow, 0))
    deadline_at = plan.now + timedelta(seconds=deadline_s) if deadline_s else None
    record = FlowRecord(
        flow_id=flow_id,
        flow=plan.flow.name,
        version=plan.flow.version,
        input=input,
        status=Status.PENDING,
        position=position,
        step_started_at=plan.now,
        deadline_at=deadline_at,
        message_id=message_id,
        created_at=plan.now,
        updated_at=plan.now,
    )
    return _with_next(record, schedule(plan, record, position, 0.0))


def after(plan: Plan, record: FlowRecord, outcome: Outcome) -> FlowRecord:
    """The record once ``outcome`` of the task at ``record.position`` is taken into account."""
    planned = _after(plan, record, outcome).model_copy(update={"claim": None})
    return _new_step_counts(record, planned)


def _after(plan: Plan, record: FlowRecord, outcome: Outcome) -> FlowRecord:
    kind = record.position.kind
    if kind is TaskKind.COMPENSATE:
        return _after_compensation(plan, record, outcome)
    if isinstance(outcome, Completed):
        return _advance(plan, record, outcome.output)
    if isinstance(outcome, Failed):
        record = _forget_first_try(record)
        return _begin_failure(plan, record, Status.FAILED, _error(record, outcome.error), "failed")
    if kind is TaskKind.POLL:
        return _poll_again(plan, record, outcome)
    if isinstance(outcome, Retry):
        return _retry_action(plan, record, outcome.error)
    # NotReady from an action is a bug in the handler; retrying would not change it.
    misuse = PermanentError("an action step raised NotReady", code="NOT_READY_IN_ACTION")
    return _begin_failure(plan, record, Status.FAILED, _error(record, misuse), "failed")


def _new_step_counts(before: FlowRecord, planned: FlowRecord) -> FlowRecord:
    """Per-step counters start again when the flow moves to another step (or kind of task)."""
    old, new = before.position, planned.position
    same = (old.generation, old.step, old.kind) == (new.generation, new.step, new.kind)
    if same:
        return planned
    return planned.model_copy(update={"uncommitted": 0, "poll_errors": 0})


def _advance(plan: Plan, record: FlowRecord, output: dict[str, Any]) -> FlowRecord:
    pos = record.position
    if pos.kind is TaskKind.ACTION:
        record = _effect_done(plan, record, pos.step)
    outputs = {**record.outputs, pos.step: output}
    entry = _entry(plan, record, "succeeded" if pos.kind is TaskKind.ACTION else "ready")
    record = _log(plan, record, entry).model_copy(update={"outputs": outputs})
    if plan.flow.is_last(pos.step_index):
        # The last step's output is the flow's product; every step's output stays in outputs.
        result = Result(status=Status.SUCCEEDED, code="OK", message="flow completed", data=output)
        return _finish(plan, record, result)
    if _past_deadline(plan, record, plan.now):
        err = _timeout(
            record, "DEADLINE_EXCEEDED", "the flow's deadline passed before its next step"
        )
        return _begin_failure(plan, record, Status.TIMED_OUT, err, "deadline passed")
    index = pos.step_index + 1
    nxt = Position(
        generation=pos.generation,
        step_index=index,
        step=plan.flow.step(index).name,
        kind=kind_of(plan.flow, index),
    )
    moved = _move(plan, record, Status.RUNNING).model_copy(
        update={"position": nxt, "step_started_at": plan.now}
    )
    return _with_next(moved, schedule(plan, moved, nxt, 0.0))


def _retry_action(plan: Plan, record: FlowRecord, error: RetryableError) -> FlowRecord:
    pos = record.position
    step = plan.flow.step(pos.step_index)
    assert isinstance(step, ActionStep)
    tries = pos.attempt + 1 + record.uncommitted  # crashed deliveries count too
    if tries >= step.retry.max_attempts:
        err = _error(record, error, code="RETRIES_EXHAUSTED")
        err["message"] = f"{tries} attempts failed; last: {error.message}"
        return _begin_failure(plan, record, Status.FAILED, err, "retries exhausted")
    delay = step.retry.delay_s(retry=pos.attempt, key=f"{record.flow_id}:{pos.step}:retry")
    delay = max(delay, min(error.retry_after_s or 0.0, MAX_RETRY_AFTER_S))
    if _past_deadline(plan, record, plan.now + timedelta(seconds=delay)):
        err = _timeout(
            record, "DEADLINE_EXCEEDED", f"the flow's deadline passes before retry {tries}"
        )
        return _begin_failure(plan, record, Status.TIMED_OUT, err, "retryable error")
    entry = _entry(plan, record, "retryable error", detail=error.message, delay_s=delay)
    nxt = pos.model_copy(update={"attempt": pos.attempt + 1})
    moved = _move(plan, _log(plan, record, entry), Status.RUNNING).model_copy(
        update={"position": nxt}
    )
    return _with_next(moved, schedule(plan, moved, nxt, delay))


def _past_deadline(plan: Plan, record: FlowRecord, when: datetime) -> bool:
    """Whether ``when`` is past the flow's own deadline (the start message's ``deadline_s``)."""
    return record.deadline_at is not None and when > record.deadline_at


def poll_deadline(plan: Plan, record: FlowRecord) -> datetime:
    """When polling the current step must stop: its own deadline or the flow's, if sooner."""
    step = plan.flow.step(record.position.step_index)
    assert isinstance(step, PollStep)
    own = record.step_started_at + timedelta(seconds=step.policy.deadline_s)
    return min(own, record.deadline_at) if record.deadline_at else own


def _poll_again(plan: Plan, record: FlowRecord, outcome: Outcome) -> FlowRecord:
    pos = record.position
    step = plan.flow.step(pos.step_index)
    assert isinstance(step, PollStep)
    seen, hint = _seen(outcome)
    failing = isinstance(outcome, Retry)
    poll_errors = record.poll_errors + (1 if failing else 0)
    # Retryable errors (a 429 asking to slow down, above all) are bounded by the deadline, not
    # by a count: only not-ready answers use up max_polls.
    if not failing and pos.poll + 1 - poll_errors >= step.policy.max_polls:
        err = _timeout(
            record, "MAX_POLLS_EXCEEDED", f"not ready after {step.policy.max_polls} polls"
        )
        return _begin_failure(plan, record, Status.TIMED_OUT, err, seen)
    curve = step.policy.delay_s(n=pos.poll, key=f"{record.flow_id}:{pos.step}")
    wanted = max(curve, min(hint or 0.0, MAX_RETRY_AFTER_S))
    remaining = (poll_deadline(plan, record) - plan.now).total_seconds()
    delay = clip_to_deadline(wanted, remaining_s=remaining)  # the last wait lands on it
    if delay is None:
        return _poll_deadline_reached(plan, record, outcome, seen)
    entry = _entry(plan, record, seen, delay_s=delay)
    errors_in_a_row = pos.attempt + 1 if failing else 0
    nxt = pos.model_copy(update={"poll": pos.poll + 1, "attempt": errors_in_a_row})
    moved = _move(plan, _log(plan, record, entry), Status.RUNNING).model_copy(
        update={"position": nxt, "poll_errors": poll_errors}
    )
    return _with_next(moved, schedule(plan, moved, nxt, delay))


def _poll_deadline_reached(
    plan: Plan, record: FlowRecord, outcome: Outcome, seen: str
) -> FlowRecord:
    """TIMED_OUT if the operation was simply not ready; FAILED if the check itself kept
    failing (a broken endpoint is not a slow operation)."""
    if isinstance(outcome, Retry):
        err = _error(record, outcome.error, code="POLL_ERRORS")
        err["message"] = f"the check still failed at the deadline; last: {outcome.error.message}"
        return _begin_failure(plan, record, Status.FAILED, err, seen)
    err = _timeout(record, "DEADLINE_EXCEEDED", f"not ready by the deadline ({seen})")
    return _begin_failure(plan, record, Status.TIMED_OUT, err, seen)


def _seen(outcome: Outcome) -> tuple[str, float | None]:
    if isinstance(outcome, Waiting):
        return f"not ready: {outcome.signal.detail}", outcome.signal.delay_s
    if isinstance(outcome, Retry):
        return f"retryable error: {outcome.error.message}", outcome.error.retry_after_s
    raise TypeError(f"not a poll-again outcome: {outcome!r}")


def _begin_failure(
    plan: Plan, record: FlowRecord, status: Status, error: dict[str, Any], seen: str
) -> FlowRecord:
    """End the flow as ``status``, first undoing completed steps that can be compensated."""
    result = Result(status=status, code=error["code"], message=error["message"], error=error)
    record = _log(plan, record, _entry(plan, record, seen, detail=error["message"]))
    return _compensate_next(plan, record, result)


def _compensate_next(plan: Plan, record: FlowRecord, result: Result) -> FlowRecord:
    """Undo the newest effect that may be live and can be undone; end the flow when none is."""
    if plan.definition is None:  # no handlers to undo with: say what stays behind
        return _finish(plan, record, _with_left_behind(record, result))
    index = _next_compensation(plan.definition, record)
    if index is None:
        return _finish(plan, record, result)
    return _compensate_at(plan, record, index, result)


def _with_left_behind(record: FlowRecord, result: Result) -> Result:
    live = [e.step for e in record.effects if e.state in (EffectState.UNKNOWN, EffectState.DONE)]
    if not live:
        return result
    return result.model_copy(update={"error": {**(result.error or {}), "not_undone": live}})


def _compensate_at(plan: Plan, record: FlowRecord, index: int, result: Result) -> FlowRecord:
    pos = Position(
        generation=record.position.generation,
        step_index=index,
        step=plan.flow.step(index).name,
        kind=TaskKind.COMPENSATE,
    )
    moved = _move(plan, record, Status.COMPENSATING).model_copy(
        update={"position": pos, "pending_result": result, "step_started_at": plan.now}
    )
    return _with_next(moved, schedule(plan, moved, pos, 0.0))


def _next_compensation(flow: Flow, record: FlowRecord) -> int | None:
    """The index of the step whose effect is undone next: done or unknown (its responses may
    have been lost), newest first, and with a compensation in ``flow``."""
    pending = [
        (effect.order, i, effect)
        for i, effect in enumerate(record.effects)
        if effect.state in (EffectState.UNKNOWN, EffectState.DONE)
    ]
    # Newest first; effects of one instant in the reverse of the order they were recorded.
    for _, _, effect in sorted(pending, key=lambda t: (t[0], t[1]), reverse=True):
        index = flow.index_of(effect.step)
        step = None if index is None else flow.step(index)
        if isinstance(step, ActionStep) and step.compensate is not None:
            return index
    return None


def begin_effect(plan: Plan, record: FlowRecord) -> FlowRecord:
    """The record with the current action's effect noted as begun (unknown), before the call.

    A step whose earlier effect may still be live (a retried flow) keeps that one: its call
    carries the same idempotency key and finds it rather than making a second.
    """
    pos = record.position
    if record.live_effect(pos.step) is not None:
        return record
    over = sum(1 for e in record.effects if e.step == pos.step)  # none is live: all are over
    effect = Effect(step=pos.step, n=over, generation=pos.generation, at=plan.now)
    return record.model_copy(update={"effects": [*record.effects, effect]})


def _effect_done(plan: Plan, record: FlowRecord, step: str) -> FlowRecord:
    if record.live_effect(step) is None:
        record = begin_effect(plan, record)
    return _set_effect(record, step, state=EffectState.DONE, done_at=plan.now)


def _set_effect(record: FlowRecord, step: str, **update: Any) -> FlowRecord:
    effects = [
        e.model_copy(update=update) if e.step == step and e.state.live else e
        for e in record.effects
    ]
    return record.model_copy(update={"effects": effects})


def _forget_first_try(record: FlowRecord) -> FlowRecord:
    """Mark refused the effect a permanent error ended on its first try: the call was refused,
    and no earlier try can have made it. (It stays listed, so a retried flow calls again under
    a fresh key rather than replaying the refusal.)"""
    pos = record.position
    effect = record.live_effect(pos.step)
    first = pos.kind is TaskKind.ACTION and pos.attempt == 0 and record.uncommitted == 0
    if effect is None or not first or effect.state is not EffectState.UNKNOWN:
        return record
    if effect.generation != pos.generation:
        return record  # begun by an earlier generation: it may be live
    return _set_effect(record, pos.step, state=EffectState.REFUSED)


def _after_compensation(plan: Plan, record: FlowRecord, outcome: Outcome) -> FlowRecord:
    pos = record.position
    step = plan.flow.step(pos.step_index)
    assert isinstance(step, ActionStep)
    tries = pos.attempt + 1 + record.uncommitted
    if isinstance(outcome, Retry) and tries < step.retry.max_attempts:
        delay = step.retry.delay_s(retry=pos.attempt, key=f"{record.flow_id}:{pos.step}:undo")
        delay = max(delay, min(outcome.error.retry_after_s or 0.0, MAX_RETRY_AFTER_S))
        entry = _entry(plan, record, "retryable error", detail=outcome.error.message, delay_s=delay)
        nxt = pos.model_copy(update={"attempt": pos.attempt + 1})
        moved = _log(plan, record, entry).model_copy(update={"position": nxt})
        return _with_next(moved, schedule(plan, moved, nxt, delay))
    detail = "" if isinstance(outcome, Completed) else _describe(outcome)
    undone = isinstance(outcome, Completed)
    outcome_name = "compensated" if undone else "compensation failed"
    record = _log(plan, record, _entry(plan, record, outcome_name, detail=detail))
    state = EffectState.UNDONE if undone else EffectState.UNDO_FAILED
    record = _set_effect(record, pos.step, state=state)
    assert record.pending_result is not None
    result = record.pending_result
    if not isinstance(outcome, Completed):
        failures = [*(result.error or {}).get("compensation_failures", []), pos.step]
        result = result.model_copy(
            update={"error": {**(result.error or {}), "compensation_failures": failures}}
        )
    return _compensate_next(plan, record, result)


def _describe(outcome: Outcome) -> str:
    if isinstance(outcome, Retry | Failed):
        return outcome.error.message
    if isinstance(outcome, Waiting):
        return outcome.signal.detail
    return ""


def _finish(plan: Plan, record: FlowRecord, result: Result) -> FlowRecord:
    moved = _move(plan, record, result.status)
    return moved.model_copy(
        update={
            "result": result,
            "pending_result": None,
            "next": None,
            "next_run_at": None,
            "finished_at": plan.now,
            "expire_at": plan.now + timedelta(seconds=plan.retention_s),
            # This generation's event has not gone out yet, whatever an earlier one did.
            "result_published": False,
        }
    )


def _move(plan: Plan, record: FlowRecord, status: Status) -> FlowRecord:
    path_to(record.status, status)  # raises InvalidTransition: never written
    return record.model_copy(update={"status": status, "updated_at": plan.now})


def _with_next(record: FlowRecord, nxt: NextTask) -> FlowRecord:
    return record.model_copy(update={"next": nxt, "next_run_at": nxt.run_at})


def _log(plan: Plan, record: FlowRecord, entry: HistoryEntry, *, a_try: bool = True) -> FlowRecord:
    """Append ``entry`` to the bounded history; ``a_try`` counts it as a poll or an attempt."""
    history = [*record.history, entry]
    dropped = max(0, len(history) - plan.history_limit)
    is_poll = entry.kind is TaskKind.POLL
    counts = {
        "polls": record.polls + (1 if a_try and is_poll else 0),
        "attempts": record.attempts + (1 if a_try and not is_poll else 0),
    }
    return record.model_copy(
        update={
            "history": history[dropped:],
            "history_dropped": record.history_dropped + dropped,
            "updated_at": plan.now,
            **counts,
        }
    )


def _entry(
    plan: Plan, record: FlowRecord, outcome: str, *, detail: str = "", delay_s: float | None = None
) -> HistoryEntry:
    pos = record.position
    return HistoryEntry(
        at=plan.now,
        generation=pos.generation,
        step=pos.step,
        kind=pos.kind,
        attempt=pos.attempt,
        poll=pos.poll,
        outcome=outcome,
        detail=detail[:500],
        delay_s=None if delay_s is None else round(delay_s, 3),
    )


def _error(
    record: FlowRecord, error: RetryableError | PermanentError, *, code: str | None = None
) -> dict[str, Any]:
    pos = record.position
    # Codes and messages can come from a remote response body: bounded, so a verbose API
    # cannot push the flow document past Firestore's 1 MiB.
    return {
        "code": (code or error.code)[:100],
        "message": error.message[:2000],
        "step": pos.step,
        "attempt": pos.attempt,
    }


def _timeout(record: FlowRecord, code: str, message: str) -> dict[str, Any]:
    pos = record.position
    return {"code": code, "message": message, "step": pos.step, "polls": pos.poll + 1}


def cancel(plan: Plan, record: FlowRecord, reason: str, *, by: str = "") -> FlowRecord:
    """Cancel an active flow: undo its completed steps (if any can be undone), then end it
    CANCELLED. Its pending task becomes a stale no-op.

    A flow already compensating is refused: it is on its way to an end already.
    """
    if record.status is Status.COMPENSATING:
        raise InvalidTransition("the flow is compensating and will end by itself")
    check_transition(record.status, Status.CANCELLED)  # an ended flow: say so plainly
    if is_claimed(plan, record):
        # Its effect could land after the undo and never be undone: let the step commit first.
        assert record.claim is not None
        raise InvalidTransition(
            f"step {record.position.step!r} is running (claimed until "
            f"{record.claim.until.isoformat()}); cancel again once it has committed"
        )
    result = Result(status=Status.CANCELLED, code="CANCELLED", message=reason)
    entry = _entry(plan, record, "cancelled", detail=reason).model_copy(update={"by": by})
    record = _log(plan, record, entry, a_try=False)
    return _compensate_next(plan, record, result)


def restart(plan: Plan, record: FlowRecord, *, reason: str = "", by: str = "") -> FlowRecord:
    """Run a failed, timed-out or cancelled flow again, as a new generation; ``reason`` and
    ``by`` (the operator) are recorded on its history entry.

    It keeps the outputs of steps that are still in effect (done and not undone by this
    generation's compensations) and resumes at the first step without one: a step whose undo
    failed is not done again, and one that was undone is.
    """
    in_effect = _outputs_in_effect(plan.flow, record)
    index = next(
        (i for i, step in enumerate(plan.flow.steps) if step.name not in in_effect),
        len(plan.flow.steps) - 1,
    )
    # Later steps built on the ones being redone (a poll awaited what a redone step made).
    outputs = {s.name: in_effect[s.name] for s in plan.flow.steps[:index]}
    position = Position(
        generation=record.position.generation + 1,
        step_index=index,
        step=plan.flow.step(index).name,
        kind=kind_of(plan.flow, index),
    )
    detail = f"generation {position.generation}" + (f": {reason}" if reason else "")
    entry = _entry(plan, record, "restarted", detail=detail).model_copy(update={"by": by})
    moved = _move(plan, _log(plan, record, entry, a_try=False), Status.PENDING).model_copy(
        update={
            "position": position,
            "outputs": outputs,
            "result": None,
            "result_published": False,
            "finished_at": None,
            "expire_at": None,
            "step_started_at": plan.now,
            "deadline_at": None,
        }
    )
    return _with_next(moved, schedule(plan, moved, position, 0.0))


def _outputs_in_effect(flow: Flow, record: FlowRecord) -> dict[str, Any]:
    """Outputs that still describe the world: an action's whose effect was not undone, and a
    poll's (kept only while every step before it is kept)."""

    def kept(step: str) -> bool:
        index = flow.index_of(step)
        if index is None or isinstance(flow.step(index), PollStep):
            return index is not None
        effect = record.live_effect(step)
        return effect is not None and effect.state is not EffectState.UNKNOWN

    return {step: out for step, out in record.outputs.items() if kept(step)}


def published(record: FlowRecord, *, generation: int) -> FlowRecord | None:
    """The record with generation ``generation``'s result event marked sent; None if that
    generation is not the ended one any more (an operator retried it) or it was marked."""
    ended = record.status in TERMINAL and record.position.generation == generation
    if not ended or record.result_published:
        return None
    return record.model_copy(update={"result_published": True})


def claim(plan: Plan, record: FlowRecord, *, lease_s: float, holder: str) -> FlowRecord:
    """The record with the current position claimed by ``holder`` (one delivery) for
    ``lease_s``; an action's effect is noted as begun in the same write.

    A claim left on this try by an earlier delivery means that delivery never committed (it
    crashed, timed out, or its commit failed): it counts toward the step's attempts.
    """
    pos = record.position
    held = record.claim
    uncommitted = record.uncommitted + (
        1 if held is not None and held.position.same_try(pos) else 0
    )
    lease = Claim(position=pos, until=plan.now + timedelta(seconds=lease_s), holder=holder)
    claimed = record.model_copy(update={"claim": lease, "uncommitted": uncommitted})
    return begin_effect(plan, claimed) if pos.kind is TaskKind.ACTION else claimed


def is_claimed(plan: Plan, record: FlowRecord) -> bool:
    """Whether a delivery holds a live claim on the current position."""
    held = record.claim
    return (
        held is not None
        and held.position.same_try(record.position)
        and not held.released
        and held.until > plan.now
    )


def holds(record: FlowRecord, holder: str) -> bool:
    """Whether ``holder``'s claim is the one on the record (only its commit may land)."""
    return record.claim is not None and record.claim.holder == holder


def release(record: FlowRecord, holder: str) -> FlowRecord | None:
    """The record with ``holder``'s claim given up (its commit failed), or None if it holds none."""
    if record.claim is None or record.claim.holder != holder or record.claim.released:
        return None
    return record.model_copy(update={"claim": record.claim.model_copy(update={"released": True})})


def exhausted(plan: Plan, record: FlowRecord) -> bool:
    """Whether the current action or compensation has been delivered as often as its retry
    policy allows (committed retries and deliveries that never committed alike)."""
    pos = record.position
    step = plan.flow.step(pos.step_index)
    if not isinstance(step, ActionStep) or pos.kind is TaskKind.POLL:
        return False
    return pos.attempt + record.uncommitted >= step.retry.max_attempts


def crashed(plan: Plan, record: FlowRecord) -> FlowRecord:
    """Give up on a step whose deliveries kept ending without an outcome: an action fails
    (HANDLER_CRASHED) and is undone with the rest; a compensation is recorded as failed."""
    pos = record.position
    tries = pos.attempt + record.uncommitted
    message = (
        f"{tries} deliveries of {pos.step!r} ended without an outcome "
        "(the handler crashed, ran past its deadline, or could not commit)"
    )
    error = PermanentError(message, code="HANDLER_CRASHED")
    return after(plan, record, Failed(error))


def abort(plan: Plan, record: FlowRecord, *, code: str, message: str) -> FlowRecord:
    """End an active flow FAILED at once, undoing nothing: the flow cannot be planned any
    further (its definition no longer matches its position, or its document would be too
    large to write)."""
    pos = record.position
    error = {"code": code, "message": message, "step": pos.step, "attempt": pos.attempt}
    result = Result(status=Status.FAILED, code=code, message=message, error=error)
    entry = _entry(plan, record, "aborted", detail=message)
    return _finish(plan, _log(plan, record, entry, a_try=False), result)


def definition_gone(plan: Plan, record: FlowRecord, *, message: str) -> FlowRecord:
    """End a flow whose version is no longer registered FAILED (DEFINITION_CHANGED), undoing
    what it did with the compensations of ``plan.flow`` (the newest version), by step name."""
    pos = record.position
    error = {"code": "DEFINITION_CHANGED", "message": message, "step": pos.step}
    result = Result(status=Status.FAILED, code="DEFINITION_CHANGED", message=message, error=error)
    entry = _entry(plan, record, "definition changed", detail=message)
    return _compensate_next(plan, _log(plan, record, entry, a_try=False), result)


def unknown_flow(plan: Plan, record: FlowRecord, *, message: str) -> FlowRecord:
    """End a flow whose type no deployed version runs: FAILED (UNKNOWN_FLOW), undoing nothing
    (there are no handlers to undo with); the result names the effects left behind."""
    pos = record.position
    error = {"code": "UNKNOWN_FLOW", "message": message, "step": pos.step}
    result = Result(status=Status.FAILED, code="UNKNOWN_FLOW", message=message, error=error)
    entry = _entry(plan, record, "unknown flow", detail=message)
    return _finish(plan, _log(plan, record, entry, a_try=False), _with_left_behind(record, result))


def lost(plan: Plan, record: FlowRecord, *, rescues: int) -> FlowRecord:
    """End a flow whose task for one try was lost ``rescues`` times: FAILED (TASK_LOST), undone
    like any failure. (A task that keeps vanishing is a bug or a misconfigured queue; it must
    not be re-created for ever.)"""
    pos = record.position
    message = f"the task for {pos.label()} was lost {rescues + 1} times"
    error = {"code": "TASK_LOST", "message": message, "step": pos.step, "attempt": pos.attempt}
    return _begin_failure(plan, record, Status.FAILED, error, "task lost")


def set_aside(record: FlowRecord, until: datetime) -> FlowRecord:
    """The record with the sweeper's view of when it is due moved to ``until``: a flow the
    sweep could not settle (or found still queued) stops heading the overdue query. Its task
    (``next``) is unchanged."""
    return record.model_copy(update={"next_run_at": until})


def rescue(plan: Plan, record: FlowRecord) -> FlowRecord:
    """Replace a lost next task with a fresh one under a new name (the old name is spent)."""
    assert record.next is not None
    position = record.position.model_copy(update={"rescue": record.position.rescue + 1})
    entry = _entry(plan, record, "rescued", detail=f"task {record.next.task_id} was lost")
    moved = _log(plan, record, entry, a_try=False).model_copy(update={"position": position})
    return _with_next(moved, schedule(plan, moved, position, 0.0))

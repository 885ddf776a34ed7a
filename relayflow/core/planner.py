"""What a flow does next: pure functions from (definition, record, outcome, now) to a new record.

No I/O here. The engine reads the record, runs a handler, asks the planner for the next record,
and commits it in a transaction; everything about backoff, deadlines, retries, compensation and
results is decided in this module and unit-tested with a fixed clock.

A flow runs as tracks (records.Track): one per step running. Functions that act on the step
of one task take a record focused on its track (``FlowRecord.focused``); what they change of it
is stored back when the record is written. A step that completes ends its track and starts
one for each step that became ready (the graph says which), so steps with no path between them
run in parallel.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from relayflow.core.backoff import clip_to_deadline, compute_delay
from relayflow.core.errors import (
    InvalidTransition,
    NotReady,
    PermanentError,
    RetryableError,
    UnknownFlow,
)
from relayflow.core.flows import (
    CallbackStep,
    EffectStep,
    Flow,
    ForEach,
    IfStep,
    PollStep,
    Step,
)
from relayflow.core.position import Position, TaskKind, split_effect_name, task_id
from relayflow.core.records import (
    ADMIT_TRACK,
    CLEANUP_TRACK,
    UNDO_TRACK,
    Claim,
    Cleanup,
    CleanupState,
    Effect,
    EffectState,
    FanOut,
    FlowRecord,
    HistoryEntry,
    NextTask,
    Result,
    Track,
)
from relayflow.core.state import TERMINAL, Status, check_transition, path_to

if TYPE_CHECKING:
    from relayflow.core.kinds.base import Kinds

MAX_SCHEDULE_AHEAD_S = 29 * 24 * 3600.0  # a day inside Cloud Tasks' 30-day limit
# A Retry-After is honoured up to an hour: one header must not park a flow for weeks.
MAX_RETRY_AFTER_S = 3600.0


@dataclass(frozen=True)
class QueueNames:
    """Which Cloud Tasks queue serves which kind of task."""

    steps: str = "flow-steps"
    polls: str = "flow-polls"
    # High-priority flows' tasks: queues of their own, dispatched whatever the backlog of the
    # others (None: one pair of queues for all).
    steps_high: str | None = None
    polls_high: str | None = None

    def for_kind(self, kind: TaskKind, priority: str = "low") -> str:
        polled = kind in (TaskKind.POLL, TaskKind.WAIT)
        if priority == "high" and self.steps_high and self.polls_high:
            return self.polls_high if polled else self.steps_high
        return self.polls if polled else self.steps


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
    # What each kind of step does (``relayflow.core.kinds.REGISTRY``): passed in, not imported,
    # because the kinds' own transitions build on the planner's.
    kinds: Kinds
    history_limit: int = 200
    # Random per plan (the engine makes one each time), so a callback token cannot be guessed.
    nonce: str = ""
    # How long a finished flow's document is kept (Firestore TTL on expire_at deletes it).
    retention_s: float = 30 * 24 * 3600.0
    # A dependency's recent p95 latency (None: unknown), where adaptive retries start from.
    p95_s: Callable[[str], float | None] | None = None
    # How long an ended flow's clean-up goes on undoing (0: none; an undo that cannot be done
    # now is recorded as failed), and the long backoff its tries follow.
    undo_window_s: float = 24 * 3600.0
    undo_initial_s: float = 30.0
    undo_max_interval_s: float = 3600.0

    @property
    def flow(self) -> Flow:
        """The definition; UnknownFlow if the flow's type is not deployed."""
        if self.definition is None:
            raise UnknownFlow("the flow's type is not deployed")
        return self.definition


def kind_of(flow: Flow, index: int) -> TaskKind:
    """The task kind that runs step ``index`` forward."""
    step = flow.step(index)
    if isinstance(step, PollStep):
        return TaskKind.POLL
    if isinstance(step, ForEach):
        return TaskKind.FANOUT
    return TaskKind.CHOICE if isinstance(step, IfStep) else TaskKind.ACTION


def schedule(plan: Plan, record: FlowRecord, position: Position, delay_s: float) -> NextTask:
    """The next task for ``position``, due ``delay_s`` from now (capped at what Cloud Tasks takes).

    Cloud Tasks refuses a schedule_time more than 30 days ahead; an absurd Retry-After must
    not make the enqueue fail after the transition was committed.
    """
    delay_s = min(max(delay_s, 0.0), MAX_SCHEDULE_AHEAD_S)
    return NextTask(
        queue=plan.queues.for_kind(position.kind, record.priority),
        task_id=task_id(record.key, position),
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
    tenant: str = "default",
    priority: str = "low",
    waiting: bool = False,
) -> FlowRecord:
    """A PENDING flow whose first steps (those that run after nothing) are due now; or, if
    its tenant has no room (``waiting``), one that holds no task until it is admitted."""
    flow = plan.flow
    first = Position(step_index=0, step=flow.step(0).name, kind=kind_of(flow, 0))
    deadline_at = plan.now + timedelta(seconds=deadline_s) if deadline_s else None
    record = FlowRecord(
        flow_id=flow_id,
        flow=flow.name,
        version=flow.version,
        input=input,
        status=Status.PENDING,
        position=first,
        deadline_at=deadline_at,
        message_id=message_id,
        created_at=plan.now,
        updated_at=plan.now,
        tenant=tenant,
        priority=priority,
    )
    if waiting:
        return record.model_copy(update={"admission": "waiting", "queued_at": plan.now})
    return _start_ready(plan, record, generation=0)


def admitted(plan: Plan, record: FlowRecord, *, slot: str | None) -> FlowRecord | None:
    """A waiting flow admitted (holding ``slot``): its first steps are due now. None if it is
    not waiting any more (admitted already, cancelled)."""
    if record.admission != "waiting" or record.status is not Status.PENDING:
        return None
    entry = _entry(plan, record, "admitted", detail=f"slot {slot}" if slot else "")
    record = _log(plan, record, entry, a_try=False).model_copy(
        update={"admission": "admitted", "slot": slot, "tracks": {}, "focus": None}
    )
    return _start_ready(plan, record, generation=record.position.generation)


def await_admission(plan: Plan, record: FlowRecord, *, at: datetime) -> FlowRecord | None:
    """A waiting flow's one task: try for a slot again at ``at`` (when a slot has rested).
    None if it is not waiting, or has that task already."""
    if record.admission != "waiting" or ADMIT_TRACK in record.tracks:
        return None
    pos = record.position.model_copy(update={"kind": TaskKind.ADMIT, "rescue": 0})
    delay = max(0.0, (at - plan.now).total_seconds())
    track = Track(position=pos, next=schedule(plan, record, pos, delay), started_at=plan.now)
    return record.model_copy(update={"tracks": {ADMIT_TRACK: track}}).stored()


def admission_tried(record: FlowRecord) -> FlowRecord:
    """The waiting flow's slot retry is over (it will be handed a slot, or try again)."""
    tracks = {k: t for k, t in record.tracks.items() if k != ADMIT_TRACK}
    return record.model_copy(update={"tracks": tracks, "focus": None}).stored()


def defer(
    plan: Plan, record: FlowRecord, *, until: datetime, why: str, hand_over: bool = False
) -> FlowRecord:
    """Put off the focused task until ``until`` (its tenant paused, its dependency's breaker
    open, its retry budget spent): a new task under a new name, no attempt spent. A step
    that cannot run before its deadline ends the flow TIMED_OUT now (and undoes its effects);
    an undo is never timed out. ``hand_over`` (its dependency is down): an undo of a
    compensating flow is handed to the flow's clean-up, so the flow ends now; a clean-up's
    undo is put off at most to the end of its window, and given up once that has passed."""
    pos = record.position
    if pos.kind is not TaskKind.COMPENSATE and until > _deadline_of(plan, record):
        err = _timeout(record, "DEADLINE_EXCEEDED", f"the deadline passes while {why}")
        return _begin_failure(plan, record, Status.TIMED_OUT, err, "deferred")
    delay = max(0.0, (until - plan.now).total_seconds())
    pos = pos.model_copy(update={"deferral": pos.deferral + 1})
    if hand_over and pos.kind is TaskKind.COMPENSATE and _may_hand_over(plan, record):
        return _hand_over(plan, record, pos, delay, why=why, a_try=False).stored()
    if record.focus == CLEANUP_TRACK:
        assert record.cleanup is not None
        if plan.now >= record.cleanup.until:
            return abandon_cleanup(plan, record, f"its undo window closed while {why}").stored()
        delay = min(delay, (record.cleanup.until - plan.now).total_seconds())
    entry = _entry(plan, record, "deferred", detail=why, delay_s=delay)
    moved = _log(plan, record, entry, a_try=False).model_copy(update={"position": pos})
    return _with_next(moved, schedule(plan, moved, pos, delay)).stored()


def _deadline_of(plan: Plan, record: FlowRecord) -> datetime:
    """The latest the focused step may still run: its poll or callback deadline, or the flow's
    (the far future when there is none)."""
    if record.position.kind in (TaskKind.POLL, TaskKind.WAIT) and record.step_started_at:
        return poll_deadline(plan, record)
    return record.deadline_at or datetime.max.replace(tzinfo=UTC)


def _start_ready(plan: Plan, record: FlowRecord, *, generation: int) -> FlowRecord:
    """A track, due now, for each step that may start: not done, skipped or running, and
    all it runs after done or skipped."""
    flow = plan.flow
    ready = flow.graph.ready(record.outputs, record.skipped, record.tracks)
    tracks = dict(record.tracks)
    for name in ready:
        index = flow.index_of(name)
        assert index is not None
        position = Position(
            generation=generation,
            step_index=index,
            step=name,
            kind=kind_of(flow, index),
            scope=record.scope,  # in a lane: the ForEach and the item
            item=record.item_index,
        )
        nxt = schedule(plan, record, position, 0.0)
        token = _token(plan, record, name, generation) if _is_callback(flow, name) else None
        tracks[name] = Track(position=position, next=nxt, started_at=plan.now, token=token)
    started = record.model_copy(update={"tracks": tracks, "focus": None, "aside_until": None})
    if ready:  # the record's position names the step last started
        started = started.model_copy(update={"position": tracks[ready[-1]].position})
    return started.stored()


def _is_callback(flow: Flow, name: str) -> bool:
    return isinstance(flow.named(name), CallbackStep)


def _token(plan: Plan, record: FlowRecord, step: str, generation: int) -> str:
    """A one-use callback token: it names its flow (so a completion finds the document) and is
    unguessable (the plan's nonce); the track keeps it, which binds it to the step and the
    generation."""
    seed = f"{plan.nonce}|{record.key}|{record.created_at.isoformat()}|{step}|{generation}"
    return f"{record.key}.{hashlib.sha256(seed.encode()).hexdigest()[:40]}"


def after(plan: Plan, record: FlowRecord, outcome: Outcome) -> FlowRecord:
    """The record once ``outcome`` of the task at the focused track is taken into account.

    ``record`` is focused on the track the task ran on; the claim that delivery held ends.
    """
    if record.focus is None:  # no track: the flow has ended (or is not focused on one)
        raise InvalidTransition(f"no step of flow {record.flow_id} is running ({record.status})")
    return _after(plan, record.model_copy(update={"claim": None}), outcome).stored()


def _after(plan: Plan, record: FlowRecord, outcome: Outcome) -> FlowRecord:
    kind = record.position.kind
    if kind is TaskKind.COMPENSATE:
        return _after_compensation(plan, record, outcome)
    if isinstance(outcome, Completed):
        return _advance(plan, record, outcome.output)
    if isinstance(outcome, Failed):
        record = _forget_first_try(record)
        return _begin_failure(plan, record, Status.FAILED, _error(record, outcome.error), "failed")
    if kind in (TaskKind.POLL, TaskKind.WAIT):
        return _poll_again(plan, record, outcome)
    if isinstance(outcome, Retry):
        return _retry_action(plan, record, outcome.error)
    # NotReady from an action is a bug in the handler; retrying would not change it.
    misuse = PermanentError("an action step raised NotReady", code="NOT_READY_IN_ACTION")
    return _begin_failure(plan, record, Status.FAILED, _error(record, misuse), "failed")


def _advance(plan: Plan, record: FlowRecord, output: dict[str, Any]) -> FlowRecord:
    """The focused step is done: its track ends, and every step that became ready starts."""
    pos = record.position
    if pos.kind is TaskKind.ACTION:
        record = _effect_done(plan, record, pos.effect_name, output)
        if _is_callback(plan.flow, pos.step):
            return _await(plan, record, output)
    entry = _entry(plan, record, _done_outcome(pos.kind, output))
    record = _log(plan, record, entry).model_copy(
        update={"outputs": {**record.outputs, pos.step: output}}
    )
    if pos.kind is TaskKind.CHOICE:
        skipped = plan.flow.graph.skipped_by(pos.step, output.get("branch") == "then")
        record = record.model_copy(update={"skipped": [*record.skipped, *skipped]})
    record = _end_track(record, pos.step)
    if record.is_lane and _all_done(plan.flow, record):
        return _item_done(plan, record)
    if _all_done(plan.flow, record):
        # The product: the output of the step nothing runs after (each one's, if several).
        data = _data(plan.flow, record)
        result = Result(status=Status.SUCCEEDED, code="OK", message="flow completed", data=data)
        return _clean_up_after(plan, _finish(plan, record, result))
    more = plan.flow.graph.ready(record.outputs, record.skipped, record.tracks)
    if more and _past_deadline(plan, record, plan.now):
        err = _timeout(record, "DEADLINE_EXCEEDED", "the flow's deadline passed before a step")
        return _begin_failure(plan, record, Status.TIMED_OUT, err, "deadline passed")
    moved = _move(plan, record, Status.RUNNING)
    return _start_ready(plan, moved, generation=pos.generation)


def _done_outcome(kind: TaskKind, output: dict[str, Any]) -> str:
    if kind is TaskKind.CHOICE:
        return f"chose {output.get('branch')}"
    if kind is TaskKind.WAIT:
        return "completed"
    if kind is TaskKind.JOIN:
        return (
            f"items done ({len(output.get('items', []))}, {len(output.get('failed', []))} failed)"
        )
    return "succeeded" if kind is TaskKind.ACTION else "ready"


def _await(plan: Plan, record: FlowRecord, sent: dict[str, Any]) -> FlowRecord:
    """A callback step's run has committed: the step now waits for its token to be completed,
    with its next task the safety-net poll (if it has a check) or the timeout."""
    key = record.focus
    assert key is not None
    step = plan.flow.named(record.position.step)
    assert isinstance(step, CallbackStep)
    record = _log(plan, record, _entry(plan, record, "sent; waiting for the callback"))
    wait = record.position.model_copy(update={"kind": TaskKind.WAIT, "attempt": 0, "poll": 0})
    early = record.tracks[key].early
    tracks = {**record.tracks, key: record.tracks[key].model_copy(update={"sent": sent})}
    moved = _move(plan, record, Status.RUNNING).model_copy(
        update={"tracks": tracks, "position": wait, "step_started_at": plan.now, "poll_errors": 0}
    )
    if early is not None:  # the completion came before the run had committed
        return _after(plan, moved, _signal_outcome(early))
    first = step.policy.delay_s(n=0, key=f"{record.flow_id}:{step.name}") if step.check else None
    remaining = (poll_deadline(plan, moved) - plan.now).total_seconds()
    delay = clip_to_deadline(first if first is not None else remaining, remaining_s=remaining)
    return _with_next(moved, schedule(plan, moved, wait, delay if delay is not None else 0.0))


def signal(plan: Plan, record: FlowRecord, completion: dict[str, Any]) -> FlowRecord:
    """A callback token was completed with ``completion`` (``{"output": {...}}`` or
    ``{"error": {"code", "message"}}``): the focused callback step ends with it, or, if its
    run has not committed yet, keeps it until it has."""
    if record.position.kind is TaskKind.WAIT:
        return after(plan, record, _signal_outcome(completion))
    key = record.focus
    assert key is not None
    early = record.tracks[key].model_copy(update={"early": completion})
    return record.model_copy(update={"tracks": {**record.tracks, key: early}}).stored()


def _signal_outcome(completion: dict[str, Any]) -> Outcome:
    error = completion.get("error")
    if isinstance(error, dict):
        message = str(error.get("message") or "the callback reported a failure")
        return Failed(PermanentError(message, code=str(error.get("code") or "CALLBACK_ERROR")))
    return Completed(dict(completion.get("output") or {}))


def _end_track(record: FlowRecord, key: str) -> FlowRecord:
    tracks = {k: t for k, t in record.tracks.items() if k != key}
    return record.model_copy(update={"tracks": tracks})


def _all_done(flow: Flow, record: FlowRecord) -> bool:
    over = set(record.outputs) | set(record.skipped)
    return not record.tracks and all(step.name in over for step in flow.steps)


def _data(flow: Flow, record: FlowRecord) -> dict[str, Any]:
    sinks = [s for s in flow.graph.sinks() if s in record.outputs]
    if len(sinks) == 1:
        data: dict[str, Any] = record.outputs[sinks[0]]
        return data
    return {sink: record.outputs[sink] for sink in sinks}


def _retry_action(plan: Plan, record: FlowRecord, error: RetryableError) -> FlowRecord:
    pos = record.position
    step = step_at(plan.flow, pos)
    assert isinstance(step, EffectStep)
    tries = pos.attempt + 1 + record.uncommitted  # crashed deliveries count too
    if tries >= step.retry.max_attempts:
        err = _error(record, error, code="RETRIES_EXHAUSTED")
        err["message"] = f"{tries} attempts failed; last: {error.message}"
        return _begin_failure(plan, record, Status.FAILED, err, "retries exhausted")
    delay = step.retry.delay_s(
        retry=pos.attempt,
        key=f"{record.flow_id}:{pos.step}:retry",
        initial_s=_adaptive_start(plan, step),
    )
    delay = max(delay, min(error.retry_after_s or 0.0, MAX_RETRY_AFTER_S))
    if _past_deadline(plan, record, plan.now + timedelta(seconds=delay)):
        err = _timeout(
            record, "DEADLINE_EXCEEDED", f"the flow's deadline passes before retry {tries}"
        )
        return _begin_failure(plan, record, Status.TIMED_OUT, err, "retryable error")
    entry = _entry(plan, record, "retryable error", detail=error.message, delay_s=delay)
    nxt = pos.model_copy(update={"attempt": pos.attempt + 1, "deferral": 0})
    moved = _move(plan, _log(plan, record, entry), Status.RUNNING).model_copy(
        update={"position": nxt}
    )
    return _with_next(moved, schedule(plan, moved, nxt, delay))


def _adaptive_start(plan: Plan, step: EffectStep) -> float | None:
    """Where an adaptive retry curve starts: the dependency's recent p95 latency, if known
    and longer than the policy's own start (None: the policy's start)."""
    dependency = getattr(step, "dependency", None)
    if not step.retry.adaptive or dependency is None or plan.p95_s is None:
        return None
    p95 = plan.p95_s(dependency)
    return max(p95, step.retry.initial_s) if p95 else None


def _past_deadline(plan: Plan, record: FlowRecord, when: datetime) -> bool:
    """Whether ``when`` is past the flow's own deadline (the start message's ``deadline_s``)."""
    return record.deadline_at is not None and when > record.deadline_at


def poll_deadline(plan: Plan, record: FlowRecord) -> datetime:
    """When polling (or waiting for a callback) must stop: the step's own deadline or the
    flow's, if sooner."""
    step = step_at(plan.flow, record.position)
    assert isinstance(step, PollStep | CallbackStep)
    assert record.step_started_at is not None, "poll_deadline() needs a focused record"
    limit = step.timeout_s if isinstance(step, CallbackStep) else step.policy.deadline_s
    own = record.step_started_at + timedelta(seconds=limit)
    return min(own, record.deadline_at) if record.deadline_at else own


def _poll_again(plan: Plan, record: FlowRecord, outcome: Outcome) -> FlowRecord:
    pos = record.position
    step = step_at(plan.flow, pos)
    assert isinstance(step, PollStep | CallbackStep)
    seen, hint = _seen(outcome)
    failing = isinstance(outcome, Retry)
    poll_errors = record.poll_errors + (1 if failing else 0)
    waiting = isinstance(step, CallbackStep)  # bounded by its timeout alone
    # Retryable errors (a 429 asking to slow down, above all) are bounded by the deadline, not
    # by a count: only not-ready answers use up max_polls.
    if not waiting and not failing and pos.poll + 1 - poll_errors >= step.policy.max_polls:
        err = _timeout(
            record, "MAX_POLLS_EXCEEDED", f"not ready after {step.policy.max_polls} polls"
        )
        return _begin_failure(plan, record, Status.TIMED_OUT, err, seen)
    remaining = (poll_deadline(plan, record) - plan.now).total_seconds()
    if waiting and step.check is None:  # no safety net: the next task is the timeout
        curve = remaining
    else:
        curve = step.policy.delay_s(n=pos.poll, key=f"{record.flow_id}:{pos.step}")
    wanted = max(curve, min(hint or 0.0, MAX_RETRY_AFTER_S))
    delay = clip_to_deadline(wanted, remaining_s=remaining)  # the last wait lands on it
    if delay is None:
        return _poll_deadline_reached(plan, record, outcome, seen)
    entry = _entry(plan, record, seen, delay_s=delay)
    errors_in_a_row = pos.attempt + 1 if failing else 0
    nxt = pos.model_copy(update={"poll": pos.poll + 1, "attempt": errors_in_a_row, "deferral": 0})
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
    if record.position.kind is TaskKind.WAIT:
        err = _timeout(record, "CALLBACK_TIMEOUT", "no callback came before the timeout")
        return _begin_failure(plan, record, Status.TIMED_OUT, err, seen)
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
    """End the flow as ``status``, first undoing every effect that may be live. Steps running
    in parallel are stopped: their tasks become stale, and their effects (recorded when they
    claimed) are undone with the rest."""
    result = Result(status=status, code=error["code"], message=error["message"], error=error)
    record = _log(plan, record, _entry(plan, record, seen, detail=error["message"]))
    if record.is_lane:  # a lane never fails: its item does, and the flow decides
        index = record.item_index
        assert index is not None
        record = record.model_copy(update={"failed_items": [*record.failed_items, index]})
    return _compensate_next(plan, _stop_all(record), result)


def _stop_all(record: FlowRecord) -> FlowRecord:
    return record.model_copy(update={"tracks": {}, "focus": None})


def _compensate_next(plan: Plan, record: FlowRecord, result: Result) -> FlowRecord:
    """Undo the newest effect that may be live and can be undone; end the flow when none is."""
    if plan.definition is None:  # no handlers to undo with: say what stays behind
        return _finish(plan, record, _with_left_behind(record, result))
    if record.lanes and not record.gathered:  # first collect what the items did
        return _gather_at(plan, record, result)
    only = record.item_index if record.is_lane else None  # a lane undoes its failed item
    # ... but not what it left to its flow to undo
    states = (EffectState.UNKNOWN, EffectState.DONE) if record.is_lane else _TO_UNDO
    effect = _next_compensation(plan.definition, record, item=only, states=states)
    if effect is None:
        return _next_item(plan, record) if record.is_lane else _finish(plan, record, result)
    return _compensate_at(plan, record, effect, result)


def _with_left_behind(record: FlowRecord, result: Result) -> Result:
    live = [e.step for e in record.effects if e.state in (EffectState.UNKNOWN, EffectState.DONE)]
    if not live:
        return result
    return result.model_copy(update={"error": {**(result.error or {}), "not_undone": live}})


def _compensate_at(plan: Plan, record: FlowRecord, effect: Effect, result: Result) -> FlowRecord:
    """Start undoing ``effect``: the flow's only track is the undo track. (A lane undoing its
    failed item stays RUNNING: it goes on with its next item afterwards.)"""
    return _undo_track(plan, record, _undo_position(plan, record, effect), result)


def _undo_position(plan: Plan, record: FlowRecord, effect: Effect, **update: int) -> Position:
    """Where undoing ``effect`` starts (``update``: its try and clean-up round)."""
    scope, item, step = split_effect_name(effect.step)
    return Position(
        generation=record.position.generation,
        step_index=_index_in(plan.flow, scope, step),
        step=step,
        kind=TaskKind.COMPENSATE,
        scope=scope,
        item=item,
        **update,
    )


def _undo_track(plan: Plan, record: FlowRecord, pos: Position, result: Result) -> FlowRecord:
    nxt = schedule(plan, record, pos, 0.0)
    track = Track(position=pos, next=nxt, started_at=plan.now)
    status = Status.RUNNING if record.is_lane else Status.COMPENSATING
    moved = _move(plan, record, status).model_copy(
        update={"tracks": {UNDO_TRACK: track}, "pending_result": result, "aside_until": None}
    )
    return moved.focused(UNDO_TRACK)


def _gather_at(plan: Plan, record: FlowRecord, result: Result) -> FlowRecord:
    """Before undoing: a task that stops the ForEach lanes and brings their items' effects
    here, so everything is undone in one order, newest first."""
    scope = record.lanes[0].split(".")[1]
    index = _index_in(plan.flow, None, scope)
    pos = Position(
        generation=record.position.generation, step_index=index, step=scope, kind=TaskKind.GATHER
    )
    return _undo_track(plan, record, pos, result)


def adopted(record: FlowRecord, effects: list[Effect]) -> FlowRecord:
    """The record with ``effects`` (of its ForEach items) among its own, unless it has them."""
    known = {e.step for e in record.effects}
    merged = [*record.effects, *(e for e in effects if e.step not in known)]
    return record.model_copy(update={"effects": merged})


def gathered(plan: Plan, record: FlowRecord, effects: list[Effect]) -> FlowRecord:
    """The lanes are stopped and ``effects`` are their items' effects: undo from here."""
    known = {e.step for e in record.effects}
    merged = [*record.effects, *(e for e in effects if e.step not in known)]
    entry = _entry(plan, record, "gathered", detail=f"{len(effects)} item effects from lanes")
    record = _log(plan, record, entry, a_try=False)
    record = record.model_copy(update={"effects": merged, "gathered": True})
    assert record.pending_result is not None
    return _compensate_next(plan, _stop_all(record), record.pending_result).stored()


def _index_in(flow: Flow, scope: str | None, step: str) -> int:
    """The index of ``step`` in the flow, or in the steps of ForEach ``scope``."""
    index = _container(flow, scope).index_of(step)
    if index is None:
        raise UnknownFlow(f"flow {flow.name!r} has no step {step!r} any more")
    return index


def _container(flow: Flow, scope: str | None) -> Flow:
    """Where an item step of ForEach ``scope`` is defined: its item steps' flow, unless
    ``flow`` is that already (a lane's plan)."""
    if scope is None or scope not in flow.graph.order:
        return flow
    return _item_flow(flow, scope)


def _item_flow(flow: Flow, scope: str) -> Flow:
    each = flow.named(scope)
    assert isinstance(each, ForEach)
    return each.item_flow


def step_at(flow: Flow, position: Position) -> Step:
    """The definition of the step a position names (inside its ForEach, for an item's)."""
    return _container(flow, position.scope).step(position.step_index)


# Effects that may be live and that an undo has not given up on.
_TO_UNDO = (EffectState.UNKNOWN, EffectState.DONE, EffectState.UNDO_PENDING)


def _next_compensation(
    flow: Flow,
    record: FlowRecord,
    *,
    item: int | None,
    states: tuple[EffectState, ...] = _TO_UNDO,
) -> Effect | None:
    """The effect undone next: done or unknown (its responses may have been lost), or left
    pending, newest first, with a compensation in ``flow`` (of the item ``item`` only, if
    given; of ``states`` only)."""
    pending = [
        (effect.order, i, effect)
        for i, effect in enumerate(record.effects)
        if effect.state in states
    ]
    # Newest first; effects of one instant in the reverse of the order they were recorded.
    for _, _, effect in sorted(pending, key=lambda t: (t[0], t[1]), reverse=True):
        scope, at, name = split_effect_name(effect.step)
        if item is not None and at != item:
            continue
        try:
            step: Step | None = _container(flow, scope).named(name)
        except KeyError:
            step = None
        if isinstance(step, EffectStep) and step.compensate is not None:
            return effect
    return None


def begin_effect(plan: Plan, record: FlowRecord) -> FlowRecord:
    """The record with the current action's effect noted as begun (unknown), before the call.

    A step whose earlier effect may still be live (a retried flow) keeps that one: its call
    carries the same idempotency key and finds it rather than making a second.
    """
    pos = record.position
    name = pos.effect_name
    if record.live_effect(name) is not None:
        return record
    over = sum(1 for e in record.effects if e.step == name)  # none is live: all are over
    item = record.items[record.cursor]["item"] if record.item_index is not None else None
    # A callback step's token: its undo sees the one its run sent, so that replaying the run
    # under its key (its answers were lost) sends the same request.
    track = record.tracks.get(record.focus or "")
    token = track.token if track is not None else None
    effect = Effect(
        step=name, n=over, generation=pos.generation, at=plan.now, item=item, token=token
    )
    return record.model_copy(update={"effects": [*record.effects, effect]})


def _effect_done(plan: Plan, record: FlowRecord, step: str, output: dict[str, Any]) -> FlowRecord:
    if record.live_effect(step) is None:
        record = begin_effect(plan, record)
    return _set_effect(record, step, state=EffectState.DONE, done_at=plan.now, output=output)


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
    effect = record.live_effect(pos.effect_name)
    first = pos.kind is TaskKind.ACTION and pos.attempt == 0 and record.uncommitted == 0
    if effect is None or not first or effect.state is not EffectState.UNKNOWN:
        return record
    if effect.generation != pos.generation:
        return record  # begun by an earlier generation: it may be live
    return _set_effect(record, pos.effect_name, state=EffectState.REFUSED)


def _after_compensation(plan: Plan, record: FlowRecord, outcome: Outcome) -> FlowRecord:
    if record.focus == CLEANUP_TRACK:
        return _after_cleanup(plan, record, outcome)
    pos = record.position
    step = step_at(plan.flow, pos)
    assert isinstance(step, EffectStep)
    tries = pos.attempt + 1 + record.uncommitted
    if isinstance(outcome, Retry) and tries < step.retry.max_attempts:
        key = f"{record.flow_id}:{pos.effect_name}:undo"
        delay = step.retry.delay_s(retry=pos.attempt, key=key)
        delay = max(delay, min(outcome.error.retry_after_s or 0.0, MAX_RETRY_AFTER_S))
        entry = _entry(plan, record, "retryable error", detail=outcome.error.message, delay_s=delay)
        nxt = pos.model_copy(update={"attempt": pos.attempt + 1})
        moved = _log(plan, record, entry).model_copy(update={"position": nxt})
        return _with_next(moved, schedule(plan, moved, nxt, delay))
    if isinstance(outcome, Retry) and _may_hand_over(plan, record):
        # Its tries are spent and it may still succeed later: the flow ends now, and the
        # undo goes on as its clean-up, on the long backoff.
        nxt = pos.model_copy(update={"attempt": pos.attempt + 1})
        delay = _cleanup_delay(plan, record, tries=0, error=outcome.error)
        why = f"retryable error: {outcome.error.message}"
        return _hand_over(plan, record, nxt, delay, why=why, a_try=True)
    if isinstance(outcome, Retry) and record.is_lane and plan.undo_window_s > 0:
        return _leave_undo_to_flow(plan, record, outcome.error)
    detail = "" if isinstance(outcome, Completed) else _describe(outcome)
    undone = isinstance(outcome, Completed)
    outcome_name = "compensated" if undone else "compensation failed"
    record = _log(plan, record, _entry(plan, record, outcome_name, detail=detail))
    state = EffectState.UNDONE if undone else EffectState.UNDO_FAILED
    record = _set_effect(record, pos.effect_name, state=state)
    assert record.pending_result is not None
    result = record.pending_result
    if not isinstance(outcome, Completed):
        failures = [*(result.error or {}).get("compensation_failures", []), pos.effect_name]
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
            "tracks": {},
            "focus": None,
            "next": None,
            "claim": None,
            "next_run_at": None,
            "aside_until": None,
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
    """The focused track with its next task (a task made anew: the sweeper watches it)."""
    return record.model_copy(update={"next": nxt, "aside_until": None})


def _log(plan: Plan, record: FlowRecord, entry: HistoryEntry, *, a_try: bool = True) -> FlowRecord:
    """Append ``entry`` to the bounded history; ``a_try`` counts it as a poll or an attempt."""
    history = [*record.history, entry]
    # Past the limit the oldest quarter goes at once, not one entry per write: between trims
    # a write appends to the stored list (a transform of a few hundred bytes) instead of
    # rewriting all of it (``relayflow.gcp.documents``).
    over = len(history) > plan.history_limit
    dropped = len(history) - (plan.history_limit - plan.history_limit // 4) if over else 0
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
    CANCELLED. Its pending tasks become stale no-ops.

    A flow already compensating is refused: it is on its way to an end already. So is one
    with a step running a side effect: its effect could land after the undo and never be
    undone, so the step must commit first.
    """
    if record.status is Status.COMPENSATING:
        raise InvalidTransition("the flow is compensating and will end by itself")
    check_transition(record.status, Status.CANCELLED)  # an ended flow: say so plainly
    for key in record.tracks:
        running = record.focused(key)
        if is_claimed(plan, running):
            assert running.claim is not None
            raise InvalidTransition(
                f"step {running.position.step!r} is running (claimed until "
                f"{running.claim.until.isoformat()}); cancel again once it has committed"
            )
    result = Result(status=Status.CANCELLED, code="CANCELLED", message=reason)
    entry = _entry(plan, record, "cancelled", detail=reason).model_copy(update={"by": by})
    record = _log(plan, record, entry, a_try=False)
    return _compensate_next(plan, _stop_all(record), result).stored()


def restart(plan: Plan, record: FlowRecord, *, reason: str = "", by: str = "") -> FlowRecord:
    """Run a failed, timed-out or cancelled flow again, as a new generation; ``reason`` and
    ``by`` (the operator) are recorded on its history entry.

    It keeps the outputs of steps that are still in effect (done and not undone) and of the
    steps before them, and starts every step that is then ready: a step whose undo failed is
    not done again, one that was undone is, and so is everything that ran after it.
    """
    if record.cleaning:
        assert record.cleanup is not None
        raise InvalidTransition(
            "its clean-up is still undoing what it did (until "
            f"{record.cleanup.until.isoformat()}): retry once the clean-up is over"
        )
    kept = _outputs_kept(plan.flow, record)
    generation = record.position.generation + 1
    detail = f"generation {generation}" + (f": {reason}" if reason else "")
    entry = _entry(plan, record, "restarted", detail=detail).model_copy(update={"by": by})
    moved = _move(plan, _log(plan, record, entry, a_try=False), Status.PENDING).model_copy(
        update={
            "outputs": kept,
            "skipped": _skipped_by_choices(plan.flow, kept),
            "tracks": {},
            "focus": None,
            "result": None,
            "result_published": False,
            "cleanup": None,
            "finished_at": None,
            "expire_at": None,
            "deadline_at": None,
        }
    )
    return _start_ready(plan, moved, generation=generation)


def _outputs_kept(flow: Flow, record: FlowRecord) -> dict[str, Any]:
    """Outputs that still describe the world, each kept only while everything it ran after is
    kept (a poll awaited what a redone step made)."""
    in_effect = _outputs_in_effect(flow, record)
    kept: dict[str, Any] = {}
    changed = True
    while changed:  # to a fixpoint: definition order need not be dependency order
        changed = False
        for step in flow.graph.order:
            deps = flow.graph.deps[step]
            if step in in_effect and step not in kept and all(d in kept for d in deps):
                kept[step] = in_effect[step]
                changed = True
    return kept


def _skipped_by_choices(flow: Flow, outputs: dict[str, Any]) -> list[str]:
    skipped: list[str] = []
    for choice in flow.graph.branches:
        if choice in outputs:
            skipped += flow.graph.skipped_by(choice, outputs[choice].get("branch") == "then")
    return skipped


def _outputs_in_effect(flow: Flow, record: FlowRecord) -> dict[str, Any]:
    """Outputs whose step is still in effect: an action's whose effect was not undone, a
    poll's or a choice's."""

    def kept(step: str) -> bool:
        index = flow.index_of(step)
        if index is None or not isinstance(flow.step(index), EffectStep):
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


def unpublished(record: FlowRecord, *, generation: int) -> FlowRecord | None:
    """The record with generation ``generation``'s result event marked not sent (its publish
    failed after the commit that ended the flow marked it); None if that is moot."""
    ended = record.status in TERMINAL and record.position.generation == generation
    if not ended or not record.result_published:
        return None
    return record.model_copy(update={"result_published": False})


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
    return (begin_effect(plan, claimed) if pos.kind is TaskKind.ACTION else claimed).stored()


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
    released = record.claim.model_copy(update={"released": True})
    return record.model_copy(update={"claim": released}).stored()


def exhausted(plan: Plan, record: FlowRecord) -> bool:
    """Whether the current action or compensation has been delivered as often as its retry
    policy allows (committed retries and deliveries that never committed alike)."""
    pos = record.position
    if record.focus == CLEANUP_TRACK:  # a clean-up's crashes are bounded by its window
        closed = record.cleanup is not None and plan.now >= record.cleanup.until
        return closed and record.uncommitted > 0
    step = step_at(plan.flow, pos)
    claimed = pos.kind in (TaskKind.ACTION, TaskKind.COMPENSATE)
    if not isinstance(step, EffectStep) or not claimed:
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
    if record.focus == CLEANUP_TRACK:  # the flow has ended: only its clean-up can stop
        return abandon_cleanup(plan, record, message).stored()
    pos = record.position
    error = {"code": code, "message": message, "step": pos.step, "attempt": pos.attempt}
    result = Result(status=Status.FAILED, code=code, message=message, error=error)
    entry = _entry(plan, record, "aborted", detail=message)
    return _finish(plan, _log(plan, record, entry, a_try=False), result).stored()


def definition_gone(plan: Plan, record: FlowRecord, *, message: str) -> FlowRecord:
    """End a flow whose version is no longer registered FAILED (DEFINITION_CHANGED), undoing
    what it did with the compensations of ``plan.flow`` (the newest version), by step name."""
    if record.focus == CLEANUP_TRACK:  # the flow has ended: only its clean-up can stop
        return abandon_cleanup(plan, record, message).stored()
    pos = record.position
    error = {"code": "DEFINITION_CHANGED", "message": message, "step": pos.step}
    result = Result(status=Status.FAILED, code="DEFINITION_CHANGED", message=message, error=error)
    entry = _entry(plan, record, "definition changed", detail=message)
    logged = _stop_all(_log(plan, record, entry, a_try=False))
    return _compensate_next(plan, logged, result).stored()


def unknown_flow(plan: Plan, record: FlowRecord, *, message: str) -> FlowRecord:
    """End a flow whose type no deployed version runs: FAILED (UNKNOWN_FLOW), undoing nothing
    (there are no handlers to undo with); the result names the effects left behind."""
    if record.focus == CLEANUP_TRACK:  # the flow has ended: only its clean-up can stop
        return abandon_cleanup(plan, record, message).stored()
    pos = record.position
    error = {"code": "UNKNOWN_FLOW", "message": message, "step": pos.step}
    result = Result(status=Status.FAILED, code="UNKNOWN_FLOW", message=message, error=error)
    entry = _entry(plan, record, "unknown flow", detail=message)
    logged = _log(plan, record, entry, a_try=False)
    return _finish(plan, logged, _with_left_behind(record, result)).stored()


def lost(plan: Plan, record: FlowRecord, *, rescues: int) -> FlowRecord:
    """End a flow whose task for one try was lost ``rescues`` times: FAILED (TASK_LOST), undone
    like any failure. (A task that keeps vanishing is a bug or a misconfigured queue; it must
    not be re-created for ever.)"""
    if record.focus == CLEANUP_TRACK:  # the flow has ended: only its clean-up can stop
        return abandon_cleanup(
            plan, record, f"its task for {record.position.label()} was lost {rescues + 1} times"
        ).stored()
    pos = record.position
    message = f"the task for {pos.label()} was lost {rescues + 1} times"
    error = {"code": "TASK_LOST", "message": message, "step": pos.step, "attempt": pos.attempt}
    return _begin_failure(plan, record, Status.FAILED, error, "task lost").stored()


def set_aside(record: FlowRecord, until: datetime) -> FlowRecord:
    """The record with the sweeper's view of when it is due moved to ``until``: a flow the
    sweep could not settle (or found still queued) stops heading the overdue query. Its task
    (``next``) is unchanged; the next task made for it ends the setting aside."""
    return record.model_copy(update={"aside_until": until}).stored()


def rescue(plan: Plan, record: FlowRecord) -> FlowRecord:
    """Replace a lost next task with a fresh one under a new name (the old name is spent)."""
    assert record.next is not None
    position = record.position.model_copy(update={"rescue": record.position.rescue + 1})
    entry = _entry(plan, record, "rescued", detail=f"task {record.next.task_id} was lost")
    moved = _log(plan, record, entry, a_try=False).model_copy(update={"position": position})
    return _with_next(moved, schedule(plan, moved, position, 0.0)).stored()


# -- clean-up: undoing after the flow has ended ------------------------------------------------


def _leave_undo_to_flow(plan: Plan, record: FlowRecord, error: RetryableError) -> FlowRecord:
    """A lane's undo of its failed item whose tries are spent: the effect is left for its
    flow to undo (``undo_pending``: gathered and undone if the flow fails, its clean-up's if
    the flow succeeds), and the lane goes on with its next item."""
    pos = record.position
    entry = _entry(plan, record, "undo left to the flow", detail=error.message)
    record = _set_effect(_log(plan, record, entry), pos.effect_name, state=EffectState.UNDO_PENDING)
    assert record.pending_result is not None
    return _compensate_next(plan, record, record.pending_result)


def _may_hand_over(plan: Plan, record: FlowRecord) -> bool:
    """Whether an undo that cannot be done now can go on as the clean-up of the flow it ends
    (not a lane's: its flow decides; not with the clean-up off)."""
    return (
        plan.undo_window_s > 0
        and not record.is_lane
        and record.status is Status.COMPENSATING
        and record.pending_result is not None
    )


def _hand_over(
    plan: Plan, record: FlowRecord, nxt: Position, delay_s: float, *, why: str, a_try: bool
) -> FlowRecord:
    """End the compensating flow with its pending result, now; its undo of the focused effect
    (then of the older ones) goes on as its clean-up, from ``nxt`` in ``delay_s``."""
    assert record.pending_result is not None
    entry = _entry(plan, record, "clean-up pending", detail=why, delay_s=delay_s)
    ended = _finish(plan, _log(plan, record, entry, a_try=a_try), record.pending_result)
    window = timedelta(seconds=plan.undo_window_s)
    cleanup = Cleanup(since=plan.now, until=plan.now + window, from_position=record.position)
    return _cleanup_track(plan, ended.model_copy(update={"cleanup": cleanup}), nxt, delay_s)


def _clean_up_after(plan: Plan, ended: FlowRecord) -> FlowRecord:
    """A flow that succeeded with the undo of a failed ForEach item left to it: its clean-up
    undoes those (and only those) from now."""
    first = _next_compensation(plan.flow, ended, item=None, states=_cleanup_states(ended))
    if first is None:
        return ended
    window = timedelta(seconds=plan.undo_window_s)
    cleanup = Cleanup(since=plan.now, until=plan.now + window)
    ended = ended.model_copy(update={"cleanup": cleanup})
    return _cleanup_track(plan, ended, _undo_position(plan, ended, first), 0.0)


def _cleanup_states(record: FlowRecord) -> tuple[EffectState, ...]:
    """What a clean-up undoes: every effect that may be live, for a flow that failed; for one
    that succeeded, only the effects of failed items whose undo was left to it."""
    return (EffectState.UNDO_PENDING,) if record.status is Status.SUCCEEDED else _TO_UNDO


def _cleanup_track(plan: Plan, record: FlowRecord, pos: Position, delay_s: float) -> FlowRecord:
    """The ended flow's one track: the clean-up's undo at ``pos``, due in ``delay_s``."""
    track = Track(position=pos, next=schedule(plan, record, pos, delay_s), started_at=plan.now)
    moved = record.model_copy(update={"tracks": {CLEANUP_TRACK: track}, "aside_until": None})
    return moved.focused(CLEANUP_TRACK)


def _cleanup_delay(plan: Plan, record: FlowRecord, *, tries: int, error: RetryableError) -> float:
    """How long the clean-up waits after its ``tries``-th failed try of the focused undo: a
    long curve (hash-derived jitter), at least the dependency's Retry-After."""
    curve = compute_delay(
        n=tries,
        initial_s=min(plan.undo_initial_s, plan.undo_max_interval_s),
        multiplier=2.0,
        max_interval_s=plan.undo_max_interval_s,
        key=f"{record.flow_id}:{record.position.effect_name}:cleanup",
    )
    return max(curve, min(error.retry_after_s or 0.0, MAX_RETRY_AFTER_S))


def _after_cleanup(plan: Plan, record: FlowRecord, outcome: Outcome) -> FlowRecord:
    """The clean-up's undo ended: the next one (newest first), or the clean-up is over."""
    pos, cleanup = record.position, record.cleanup
    assert cleanup is not None
    if isinstance(outcome, Retry):
        return _retry_cleanup(plan, record, outcome.error)
    undone = isinstance(outcome, Completed)
    detail = "" if undone else _describe(outcome)
    outcome_name = "compensated" if undone else "compensation failed"
    record = _log(plan, record, _entry(plan, record, outcome_name, detail=detail))
    record = _set_effect(
        record, pos.effect_name, state=EffectState.UNDONE if undone else EffectState.UNDO_FAILED
    )
    left = cleanup.left if undone else [*cleanup.left, pos.effect_name]
    record = record.model_copy(
        update={"cleanup": cleanup.model_copy(update={"tries": 0, "left": left})}
    )
    return _cleanup_next(plan, record)


def _cleanup_next(plan: Plan, record: FlowRecord) -> FlowRecord:
    effect = _next_compensation(plan.flow, record, item=None, states=_cleanup_states(record))
    if effect is None:
        return _end_cleanup(plan, record)
    pos = _undo_position(plan, record, effect, undo_round=record.position.undo_round)
    return _cleanup_track(plan, record, pos, 0.0)


def _retry_cleanup(plan: Plan, record: FlowRecord, error: RetryableError) -> FlowRecord:
    """Try the undo again on the long backoff; the last wait lands on the window's end, and a
    failure after it gives the clean-up up."""
    pos, cleanup = record.position, record.cleanup
    assert cleanup is not None
    left_s = (cleanup.until - plan.now).total_seconds()
    if left_s <= 0:
        return abandon_cleanup(plan, record, f"its undo window closed; last: {error.message}")
    tries = cleanup.tries + 1
    delay = min(_cleanup_delay(plan, record, tries=tries, error=error), left_s)
    entry = _entry(plan, record, "retryable error", detail=error.message, delay_s=delay)
    nxt = pos.model_copy(update={"attempt": pos.attempt + 1})
    update = {"position": nxt, "cleanup": cleanup.model_copy(update={"tries": tries})}
    moved = _log(plan, record, entry).model_copy(update=update)
    return _with_next(moved, schedule(plan, moved, nxt, delay))


def abandon_cleanup(plan: Plan, record: FlowRecord, why: str) -> FlowRecord:
    """Give the clean-up up: every effect it had still to undo is recorded as left behind
    (its undo failed: it may be live), and the clean-up ends ABANDONED."""
    cleanup = record.cleanup
    assert cleanup is not None
    left = list(cleanup.left)
    while (effect := _next_compensation_or_none(plan, record)) is not None:  # newest first
        record = _set_effect(record, effect.step, state=EffectState.UNDO_FAILED)
        left.append(effect.step)
    update = {"left": left, "reason": why[:500]}
    return _end_cleanup(
        plan, record.model_copy(update={"cleanup": cleanup.model_copy(update=update)})
    )


def _next_compensation_or_none(plan: Plan, record: FlowRecord) -> Effect | None:
    """The next effect to undo, or None also when the flow's type is not deployed."""
    states = _cleanup_states(record)
    if plan.definition is None:
        live = [e for e in record.effects if e.state in states]
        return live[-1] if live else None
    return _next_compensation(plan.definition, record, item=None, states=states)


def _end_cleanup(plan: Plan, record: FlowRecord) -> FlowRecord:
    """The clean-up is over: DONE when nothing was left behind, else ABANDONED; its event
    (the result event again, with the clean-up's end) is due."""
    ending = record.cleanup
    assert ending is not None
    state = CleanupState.ABANDONED if ending.left else CleanupState.DONE
    detail = ending.reason if state is CleanupState.ABANDONED else ""
    if state is CleanupState.ABANDONED and not detail:
        detail = f"not undone: {', '.join(ending.left)}"
    entry = _entry(plan, record, f"clean-up {state}", detail=detail)
    record = _log(plan, record, entry, a_try=False)
    cleanup = ending.model_copy(update={"state": state, "finished_at": plan.now})
    return record.model_copy(
        update={
            "cleanup": cleanup,
            "tracks": {},
            "focus": None,
            "next": None,
            "claim": None,
            "next_run_at": None,
            "aside_until": None,
            "result_published": False,
        }
    )


def _undone_again(record: FlowRecord, effect: Effect) -> bool:
    """Whether an operator's undo again covers ``effect``: any that may be live, of a flow
    that did not succeed; of one that did, only a failed ForEach item's whose undo was left
    or given up (what its own steps did is its result, and stays)."""
    if record.status is not Status.SUCCEEDED:
        return effect.state in (*_TO_UNDO, EffectState.UNDO_FAILED)
    undoing = (EffectState.UNDO_PENDING, EffectState.UNDO_FAILED)
    return effect.state in undoing and split_effect_name(effect.step)[0] is not None


def undoable(record: FlowRecord) -> list[Effect]:
    """What an operator's undo again would undo now (nothing while a clean-up runs)."""
    if record.status not in TERMINAL or record.cleaning:
        return []
    return [e for e in record.effects if _undone_again(record, e)]


def undo_again(plan: Plan, record: FlowRecord, reason: str, *, by: str = "") -> FlowRecord:
    """An operator's undo of what an ended flow left live (a clean-up given up, an undo that
    failed for good): a new clean-up round with a fresh window."""
    if record.status not in TERMINAL:
        raise InvalidTransition(f"the flow is {record.status}: it has not ended")
    if record.cleaning:
        assert record.cleanup is not None
        raise InvalidTransition(
            f"its clean-up is still undoing effects (until {record.cleanup.until.isoformat()})"
        )
    redo = [e for e in record.effects if _undone_again(record, e)]
    record = record.model_copy(
        update={
            "effects": [
                e.model_copy(update={"state": EffectState.UNDO_PENDING})
                if e.state is EffectState.UNDO_FAILED and _undone_again(record, e)
                else e
                for e in record.effects
            ]
        }
    )
    states = _cleanup_states(record)
    first = _next_compensation(plan.flow, record, item=None, states=states) if redo else None
    if first is None:
        raise InvalidTransition("nothing is left to undo: every effect it made was undone")
    entry = _entry(plan, record, "undo requested", detail=reason).model_copy(update={"by": by})
    record = _log(plan, record, entry, a_try=False)
    rounds = 1 + max((e.position.undo_round for e in record.tracks.values()), default=0)
    rounds = max(rounds, record.position.undo_round + 1)
    window = timedelta(seconds=plan.undo_window_s or 24 * 3600.0)
    cleanup = Cleanup(since=plan.now, until=plan.now + window, reason=reason, by=by)
    pos = _undo_position(plan, record, first, undo_round=rounds)
    return _cleanup_track(plan, record.model_copy(update={"cleanup": cleanup}), pos, 0.0).stored()


# -- ForEach --------------------------------------------------------------------------------------


def lane_id(key: str, scope: str, lane: int) -> str:
    """The document id of ForEach ``scope``'s lane ``lane`` of the flow keyed ``key``."""
    return f"{key}.{scope}.{lane}"


def fanned_out(plan: Plan, record: FlowRecord, items: list[Any]) -> FlowRecord:
    """The focused ForEach has listed its ``items``: it now runs them in lanes (created by the
    engine after this commit), or, with no items, is done at once."""
    each = plan.flow.named(record.position.step)
    assert isinstance(each, ForEach)
    if not items:
        return after(plan, record, Completed({"items": [], "failed": []}))
    lanes = min(each.concurrency, len(items))
    fan = FanOut(total=len(items), lanes=lanes)
    detail = f"{len(items)} items in {lanes} lanes"
    record = _log(plan, record, _entry(plan, record, "fanned out", detail=detail), a_try=False)
    key = record.position.step
    ids = [lane_id(record.key, key, k) for k in range(lanes)]
    tracks = {**record.tracks, key: record.tracks[key].model_copy(update={"fanout": fan})}
    moved = _move(plan, record, Status.RUNNING)
    return moved.model_copy(update={"tracks": tracks, "lanes": [*record.lanes, *ids]}).stored()


def lanes_started(record: FlowRecord) -> FlowRecord:
    """The focused ForEach's lanes exist: its own task is done (the lanes report to it)."""
    return record.model_copy(update={"next": None}).stored()


def new_lane(
    plan: Plan, parent: FlowRecord, *, scope: str, lane: int, items: list[Any]
) -> FlowRecord:
    """Lane ``lane`` of ForEach ``scope`` (``plan`` is for the ForEach's item steps): items
    lane, lane + lanes, …, its first item due now. It shares the flow's input and
    incarnation, so its idempotency keys are the flow's."""
    stride = min(len(items), _concurrency(parent, scope, plan))
    mine = [{"index": i, "item": items[i]} for i in range(lane, len(items), stride)]
    first = Position(step_index=0, step=plan.flow.step(0).name, kind=kind_of(plan.flow, 0))
    record = FlowRecord(
        flow_id=lane_id(parent.key, scope, lane),
        flow=parent.flow,
        version=parent.version,
        input=parent.input,
        status=Status.PENDING,
        position=first,
        created_at=parent.created_at,
        updated_at=plan.now,
        trace=parent.trace,
        deadline_at=parent.deadline_at,  # the flow's deadline bounds its items too
        tenant=parent.tenant,
        priority=parent.priority,
        parent=parent.key,
        scope=scope,
        lane=lane,
        items=mine,
    )
    return _start_ready(plan, record, generation=parent.position.generation)


def _concurrency(parent: FlowRecord, scope: str, plan: Plan) -> int:
    track = parent.tracks.get(scope)
    assert track is not None and track.fanout is not None
    return track.fanout.lanes


def lane_reported(
    plan: Plan, record: FlowRecord, *, lane: int, failed: list[int], ended: bool, detail: str
) -> FlowRecord | None:
    """Lane ``lane`` of the focused ForEach reports items that failed for good and, when it has
    run all its items, that it ended. More failed items than tolerated fail the flow; when every
    lane has ended the ForEach's join is due. None if it changes nothing (a repeat)."""
    each = plan.flow.named(record.position.step)
    track = record.tracks[record.position.step]
    assert isinstance(each, ForEach) and track.fanout is not None
    fan = track.fanout
    now_failed = sorted(set(fan.failed) | set(failed))
    now_ended = sorted(set(fan.ended) | ({lane} if ended else set()))
    if (now_failed, now_ended) == (fan.failed, fan.ended):
        return None
    fan = fan.model_copy(update={"failed": now_failed, "ended": now_ended})
    tracks = {**record.tracks, record.position.step: track.model_copy(update={"fanout": fan})}
    record = record.model_copy(update={"tracks": tracks})
    if len(now_failed) > each.tolerate:
        message = f"{len(now_failed)} of {fan.total} items failed (tolerated: {each.tolerate})"
        err: dict[str, Any] = {"code": "ITEMS_FAILED", "step": each.name}
        err["message"] = f"{message}; {detail}"[:2000]
        err["items"] = now_failed[:100]
        return _begin_failure(plan, record, Status.FAILED, err, "items failed").stored()
    if len(now_ended) < fan.lanes:
        return record.stored()
    join = record.position.model_copy(update={"kind": TaskKind.JOIN})
    moved = record.model_copy(update={"position": join})
    return _with_next(moved, schedule(plan, moved, join, 0.0)).stored()


def _item_done(plan: Plan, record: FlowRecord) -> FlowRecord:
    """A lane's item ran all its steps: keep its output, go on with the next item."""
    index = record.item_index
    assert index is not None
    outputs = {**record.item_outputs, str(index): _data(plan.flow, record)}
    return _next_item(plan, record.model_copy(update={"item_outputs": outputs}))


def _next_item(plan: Plan, record: FlowRecord) -> FlowRecord:
    """A lane moves to its next item (after one done, or failed and undone), or ends."""
    moved = _move(plan, record, Status.RUNNING).model_copy(
        update={
            "cursor": record.cursor + 1,
            "outputs": {},
            "skipped": [],
            "tracks": {},
            "focus": None,
            "pending_result": None,
        }
    )
    if moved.item_index is None:  # past its last item: the lane has done its part
        done = len(moved.item_outputs)
        result = Result(status=Status.SUCCEEDED, code="OK", message=f"{done} items done")
        return _finish(plan, moved, result)
    return _start_ready(plan, moved, generation=record.position.generation)


def cancel_lane(plan: Plan, record: FlowRecord) -> FlowRecord | None:
    """Stop a lane (its flow is being undone): its pending tasks become stale; nothing is
    reported back (the flow stopped it). None if it has ended already."""
    if record.status in TERMINAL:
        return None
    result = Result(status=Status.CANCELLED, code="CANCELLED", message="the flow is being undone")
    ended = _finish(plan, _stop_all(record), result)
    return ended.model_copy(update={"result_published": True}).stored()


def join_output(lanes: list[FlowRecord], total: int) -> dict[str, Any]:
    """A ForEach's output: each item's output in the list's order, and the failed indexes."""
    outputs: dict[str, Any] = {}
    failed: set[int] = set()
    for lane in lanes:
        outputs.update(lane.item_outputs)
        failed |= set(lane.failed_items)
    items = [outputs.get(str(i)) for i in range(total)]
    return {"items": items, "failed": sorted(failed)}

"""What every planning function shares: the plan (definition, queues, clock reading, limits,
the kinds of step), a handler's outcome, and the next task for a position.

The bottom of the planner package: every other module of it builds on this one. It names
what the planner asks of a kind of step as protocols (``StepKind``, ``StepKinds``) instead of
importing ``relayflow.core.kinds``: the kinds' own transitions build on the planner's, so the
planner reaches them only through ``Plan.kinds``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from relayflow.core.codec import PLAIN, Codec
from relayflow.core.errors import NotReady, PermanentError, RetryableError, UnknownFlow
from relayflow.core.flows import Flow, Handler, PollPolicy, RetryPolicy, Step
from relayflow.core.position import POLL_CHAIN, Position, TaskKind, task_id
from relayflow.core.queue_shards import MAX_QUEUE_SHARDS, shard_name
from relayflow.core.records import FlowRecord, NextTask
from relayflow.core.sharding import shard_of

MAX_SCHEDULE_AHEAD_S = 29 * 24 * 3600.0  # a day inside Cloud Tasks' 30-day limit
# A Retry-After is honoured up to an hour: one header must not park a flow for weeks.
MAX_RETRY_AFTER_S = 3600.0

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class QueueNames:
    """Which Cloud Tasks queue serves which kind of task, and how many shards each kind has.

    A Cloud Tasks queue dispatches at most 500 tasks per second
    (https://cloud.google.com/tasks/docs/reference/rest/v2/projects.locations.queues#ratelimits),
    so each kind has ``shards`` queues: a flow's tasks all go to its shard
    (``FlowRecord.queue_shard``, chosen from its key when it is created), so their
    deterministic names still deduplicate and their order is kept.
    """

    steps: str = "flow-steps"
    polls: str = "flow-polls"
    # High-priority flows' tasks: queues of their own, dispatched whatever the backlog of the
    # others (None: one pair of queues for all).
    steps_high: str | None = None
    polls_high: str | None = None
    # Queues of each kind (the same for every kind: one shard number serves all of a flow's
    # tasks). What a flow created now is spread over.
    shards: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.shards <= MAX_QUEUE_SHARDS:
            raise ValueError(f"queue shards must be 1..{MAX_QUEUE_SHARDS}, not {self.shards}")

    def shard_of(self, key: str) -> int:
        """The shard a flow (or a lane) keyed ``key`` created now gets for good."""
        return shard_of(key, self.shards)

    def for_kind(self, kind: TaskKind, priority: str = "low", shard: int | None = 0) -> str:
        """The queue of a task of ``kind`` for a flow of ``priority`` on ``shard`` (None: a
        record written before shards, on shard 0)."""
        polled = kind in (TaskKind.POLL, TaskKind.WAIT)
        if priority == "high" and self.steps_high and self.polls_high:
            base = self.polls_high if polled else self.steps_high
        else:
            base = self.polls if polled else self.steps
        return shard_name(base, self.placed(shard or 0))

    def placed(self, shard: int) -> int:
        """The shard a flow's ``shard`` is served on: itself, or, if the count was lowered
        below it (a mistake: the count may only grow), ``shard % shards`` — the flow's tasks
        then move to another queue, so a task already queued on the old one may run beside
        its re-enqueued twin (claims keep effects single). Warned once per shard."""
        if shard < self.shards:
            return shard
        _warn_lowered(shard, self.shards)
        return shard % self.shards


@functools.cache
def _warn_lowered(shard: int, shards: int) -> None:
    log.warning(
        "a flow's queue shard is past the configured count: the count was lowered; its "
        "tasks go to shard %d instead (raise RELAYFLOW_QUEUE_SHARDS back to at least %d)",
        shard % shards,
        shard + 1,
        extra={"queue_shard": shard, "queue_shards": shards},
    )


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
    kinds: StepKinds
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
    # How many polls a poll chain runs between two writes of its flow's document
    # (``planner.chain``; 1: every poll writes).
    poll_chain: int = POLL_CHAIN
    # How stored values read back (``core.codec``): what an output model checks is the value
    # a consumer will see, not its reference.
    codec: Codec = PLAIN

    @property
    def flow(self) -> Flow:
        """The definition; UnknownFlow if the flow's type is not deployed."""
        if self.definition is None:
            raise UnknownFlow("the flow's type is not deployed")
        return self.definition


class StepKind(Protocol):
    """What the planner asks of one kind of step (``relayflow.core.kinds.Kind``)."""

    @property
    def forward(self) -> TaskKind:
        """The task that runs a step of this kind forward."""
        ...

    @property
    def hands_token(self) -> bool:
        """Whether a step of this kind is handed a callback token when it starts."""
        ...

    @property
    def makes_effects(self) -> bool:
        """Whether running a step of this kind forward may have an effect in the world."""
        ...

    def retry(self, step: Step) -> RetryPolicy | None:
        """How a failed try of ``step`` (or of its undo) is retried, if it is."""
        ...

    def compensation(self, step: Step) -> Handler | None:
        """The handler that undoes ``step``'s effect, if it has one."""
        ...

    def dependency(self, step: Step) -> str | None:
        """What ``step`` calls, whose breaker guards it (None: nothing named)."""
        ...

    def policy(self, step: Step) -> PollPolicy | None:
        """The backoff a poll step's polls follow (None: not a poll step)."""
        ...

    def deadline(self, plan: Plan, record: FlowRecord) -> datetime:
        """When the focused step's wait (a poll, a callback) must stop."""
        ...

    def after(self, plan: Plan, record: FlowRecord, outcome: Outcome) -> FlowRecord:
        """The record once ``outcome`` of the focused task, run forward, is taken into account."""
        ...

    def runs_itself(self, task: TaskKind) -> bool:
        """Whether the engine does ``task`` itself (no handler of the flow's runs)."""
        ...


class StepKinds(Protocol):
    """What the planner asks of the registered kinds (``relayflow.core.kinds.Kinds``)."""

    def of(self, step: Step) -> StepKind:
        """The kind of ``step``."""
        ...

    def at(self, flow: Flow, position: Position) -> StepKind:
        """The kind of the step ``position`` names in ``flow``."""
        ...

    def container(self, flow: Flow, scope: str | None) -> Flow:
        """Where the item steps of ForEach ``scope`` are defined (``flow`` itself if None)."""
        ...

    def claims(self, task: TaskKind) -> bool:
        """Whether ``task`` is claimed before it runs (it may have a side effect)."""
        ...

    def keep_outputs(self, flow: Flow) -> bool:
        """Whether a ForEach whose item steps are ``flow`` keeps its items' outputs."""
        ...


def step_of(plan: Plan, position: Position) -> Step:
    """The definition of the step a position names (inside its ForEach, for an item's)."""
    return plan.kinds.container(plan.flow, position.scope).step(position.step_index)


def dependency_at(plan: Plan, position: Position) -> str | None:
    """The dependency the step at ``position`` names (None: none, or no definition has it)."""
    if plan.definition is None:
        return None
    try:
        step = step_of(plan, position)
    except LookupError:  # a definition that no longer has the step
        return None
    return plan.kinds.of(step).dependency(step)


def schedule(plan: Plan, record: FlowRecord, position: Position, delay_s: float) -> NextTask:
    """The next task for ``position``, due ``delay_s`` from now (capped at what Cloud Tasks takes).

    Cloud Tasks refuses a schedule_time more than 30 days ahead; an absurd Retry-After must
    not make the enqueue fail after the transition was committed.
    """
    delay_s = min(max(delay_s, 0.0), MAX_SCHEDULE_AHEAD_S)
    return NextTask(
        # The flow's own shard: every task of a flow on one queue, so its names deduplicate.
        queue=plan.queues.for_kind(position.kind, record.priority, record.queue_shard),
        task_id=task_id(record.key, position),
        run_at=plan.now + timedelta(seconds=delay_s),
        position=position,
    )

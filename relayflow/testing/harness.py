"""Run flows through the real planner and engine, in memory, with time that skips ahead.

A ``Harness`` holds an engine over MemoryStore, MemoryQueue and MemoryEvents and a virtual
clock. ``run`` delivers queued tasks in the order they are due and jumps the clock to each
one's ``run_at`` (as Temporal's time-skipping test environment does), so a flow that polls
for ten minutes runs in milliseconds. Handlers are the flow's own, or scripted per step.
The registry's schedules tick as ``advance``, ``advance_to`` and ``run_until`` skip time (each
tick run at its tick's time, as the deployment's every-minute job would); ``tick()`` runs one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from opentelemetry.trace import Tracer

from relayflow.core.breaker_policy import Dependencies
from relayflow.core.breaker_state import BreakerState
from relayflow.core.breakers import Breakers
from relayflow.core.bulk import DEFAULT_RATE_PER_S, BulkTask
from relayflow.core.bulk_runner import BatchReport, BulkRunner
from relayflow.core.bulk_state import BulkAction, BulkRow, BulkState
from relayflow.core.clock import FakeClock
from relayflow.core.engine import (
    CallbackAnswer,
    Engine,
    Limits,
    Ran,
    SignalAnswer,
    StartResult,
    SweepReport,
)
from relayflow.core.errors import RelayflowError
from relayflow.core.flows import Flow, Handler, Registry, Step, StepContext
from relayflow.core.kinds import REGISTRY
from relayflow.core.listing import FlowFilter
from relayflow.core.payloads import Offload
from relayflow.core.planner import Preview, QueueNames
from relayflow.core.ports import Enqueued
from relayflow.core.position import TaskKind, TaskPayload
from relayflow.core.records import FlowRecord, HistoryEntry, NextTask
from relayflow.core.schedule_state import ScheduleState
from relayflow.core.scheduler import Scheduler, TickReport
from relayflow.core.schedules import FLOW_ID_PREFIX, next_ticks
from relayflow.core.sealing import Sealer, Sealing, opened_result, owner_of
from relayflow.core.state import TERMINAL
from relayflow.core.tenants import DEFAULT_TENANT, Tenants
from relayflow.core.versions import VersionUse, dropped, keeps, pairs, version_uses
from relayflow.metrics import Metrics
from relayflow.testing.memory import (
    MemoryBlobs,
    MemoryBreakers,
    MemoryBulkQueue,
    MemoryBulkStore,
    MemoryEvents,
    MemoryQueue,
    MemoryScheduleStates,
    MemoryStore,
)
from relayflow.testing.sealer import MemorySealer

START = datetime(2030, 1, 1, tzinfo=UTC)
# How long Cloud Tasks waits before delivering again a task that answered 409 or 5xx.
REDELIVERY_S = 10.0
REDELIVERY_QUEUE = "redelivery"

Entry = dict[str, Any] | None | BaseException | Callable[[StepContext], dict[str, Any] | None]


class Crash(BaseException):
    """Raise it from a handler (or script it) to play a process that dies mid-call: nothing
    is committed, the claim stays, and Cloud Tasks delivers the task again later."""


@dataclass
class Scripted:
    """A handler that plays ``entries`` in turn, one per call, repeating the last one.

    An exception is raised, a dict (or None) is returned, a function is called with the
    context (and its result returned). ``calls`` keeps each context.
    """

    entries: tuple[Entry, ...]
    calls: list[StepContext] = field(default_factory=list)

    def __call__(self, ctx: StepContext) -> dict[str, Any] | None:
        self.calls.append(ctx)
        entry = self.entries[min(len(self.calls), len(self.entries)) - 1]
        if isinstance(entry, BaseException):
            raise entry
        if callable(entry):
            return entry(ctx)
        return entry


def scripted(*entries: Entry) -> Scripted:
    """A handler that returns or raises each entry in turn: ``scripted(NotReady(), {...})``."""
    if not entries:
        raise ValueError("scripted() needs at least one entry")
    return Scripted(entries)


@dataclass(frozen=True)
class Call:
    """One handler call the harness saw: which step, forward or undo, with what context."""

    step: str
    kind: TaskKind
    context: StepContext


class Harness:
    """Flows from ``registry`` on in-memory ports and a virtual clock.

    Polls run as chains, as a deployment runs them: ``poll_chain`` (the deployment's
    RELAYFLOW_POLL_CHAIN; default 20) polls between two writes of a flow's document.

    >>> h = Harness(registry)
    >>> flow_id = h.start("orders", {"sku": "A-1"})
    >>> h.run(flow_id).status
    <Status.SUCCEEDED: 'SUCCEEDED'>
    """

    def __init__(
        self,
        registry: Registry | Flow | Iterable[Flow],
        *,
        start: datetime = START,
        duplicate_deliveries: bool = False,
        limits: Limits | None = None,
        tenants: Tenants | None = None,
        dependencies: Dependencies | None = None,
        metrics: Metrics | None = None,
        poll_chain: int | None = None,
        offload_threshold_bytes: int | None = None,
        sealer: Sealer | None = None,
        tracer: Tracer | None = None,
    ) -> None:
        """``offload_threshold_bytes``: values over this many bytes of JSON go to a bucket
        (``blobs``, in memory), as RELAYFLOW_OFFLOAD_BUCKET and _THRESHOLD_BYTES make a
        deployment do; None: none do, and the inline limits hold. ``sealer``: what seals the
        flows' sensitive fields (None: a ``MemorySealer`` of its own). ``tracer``: its
        engine's spans."""
        self.clock = FakeClock(start)
        # Seals the flows' sensitive fields in the documents, opens them for handlers, as a
        # deployment's keyset does (a key of its own by default: ``MemorySealer``).
        self.sealer = sealer or MemorySealer()
        # Dependencies' breakers, shared as Firestore shares them (on, with their defaults,
        # unless ``dependencies`` says otherwise: ``Dependencies.off()``).
        self.breakers = MemoryBreakers()
        self.dependencies = dependencies or Dependencies()
        self.store = MemoryStore()
        self.queue = MemoryQueue()
        self.events = MemoryEvents()
        self.calls: list[Call] = []
        # Deliveries that crashed or were answered 5xx, with why; each is delivered again.
        self.failed_deliveries: list[tuple[TaskPayload, BaseException]] = []
        self.duplicate_deliveries = duplicate_deliveries
        self.limits = limits or Limits(continue_inline=True)  # as a deployment runs
        if poll_chain is not None:  # polls between two writes, as RELAYFLOW_POLL_CHAIN sets
            self.limits = replace(self.limits, poll_chain=poll_chain)
        self.tenants = tenants
        self.metrics = metrics  # e.g. relayflow.metrics.OtelMetrics, to read what was counted
        self.tracer = tracer  # e.g. one writing to an InMemorySpanExporter, to read the spans
        self._registry = _as_registry(registry)
        self._messages = 0
        # Schedules' documents, as Firestore's ``schedules/{name}`` holds them.
        self.schedule_states = MemoryScheduleStates()
        # Bulk actions' documents and rows, and their batch tasks (``bulk``).
        self.bulk_store = MemoryBulkStore()
        self.bulk_queue = MemoryBulkQueue()
        self.blobs = MemoryBlobs()
        self.offload = (
            None
            if offload_threshold_bytes is None
            else Offload(self.blobs, threshold_bytes=offload_threshold_bytes)
        )
        self.engine = self._build()

    # -- what a test does ----------------------------------------------------------------

    @property
    def now(self) -> datetime:
        """The virtual time."""
        return self.clock.now()

    def start(
        self,
        flow: str,
        input: dict[str, Any] | None = None,
        *,
        flow_id: str | None = None,
        deadline_s: float | None = None,
        tenant: str | None = None,
        priority: str | None = None,
        labels: dict[str, str] | None = None,
    ) -> str:
        """Publish a start message (on ``tenant``'s own topic, as its publishers do); the flow
        id. AssertionError if the message is rejected (a bad label too)."""
        body = _message(flow, input or {}, flow_id, deadline_s)
        if priority:
            body["priority"] = priority
        if labels:
            body["labels"] = labels
        result = self.publish(body, tenant=tenant or DEFAULT_TENANT)
        if result.flow_id is None or result.reason:
            raise AssertionError(f"start rejected: {result.reason}")
        return result.flow_id

    def publish(
        self,
        body: dict[str, Any] | bytes,
        *,
        message_id: str | None = None,
        tenant: str = DEFAULT_TENANT,
        attributes: dict[str, str] | None = None,
    ) -> StartResult:
        """Deliver a start message as Pub/Sub would, on ``tenant``'s topic (``flow-requests``
        for the default tenant); what the engine did with it."""
        self._messages += 1
        data = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
        return self.engine.start(
            data,
            message_id=message_id or f"m{self._messages}",
            attributes=attributes or {},
            tenant=tenant,
        )

    def run(self, flow_id: str | None = None, *, max_tasks: int = 10_000) -> FlowRecord | None:
        """Deliver due tasks, skipping time ahead, until ``flow_id`` ends (or, without one,
        until no task is left); the flow's record, if one was named."""
        for _ in range(max_tasks):
            if flow_id is not None and self.flow(flow_id).status in TERMINAL:
                return self.flow(flow_id)
            if self.queue.due_first() is None:
                break
            self.deliver_next()
        else:
            raise AssertionError(f"still running after {max_tasks} tasks")
        return self.flow(flow_id) if flow_id is not None else None

    def run_cleanup(self, flow_id: str, *, max_tasks: int = 10_000) -> FlowRecord:
        """Deliver due tasks, skipping time ahead, until ``flow_id`` has ended and its
        clean-up (the undo that goes on after a failed end, on a long backoff) is over."""
        for _ in range(max_tasks):
            record = self.flow(flow_id)
            if record.status in TERMINAL and not record.cleaning:
                return record
            if self.queue.due_first() is None:
                raise AssertionError(f"flow {flow_id} is {record.status} and has no task")
            self.deliver_next()
        raise AssertionError(f"still cleaning up after {max_tasks} tasks")

    def run_until(self, at: datetime, *, max_tasks: int = 10_000) -> None:
        """Deliver the tasks due up to ``at``, then move the clock to ``at``."""
        for _ in range(max_tasks):
            task = self.queue.due_first()
            due_at = task.next.run_at if task is not None else at
            tick = self._next_tick(min(due_at, at))
            if tick is not None:  # a schedule ticks before the next task is due
                self.advance_to(tick)
                continue
            if task is None or task.next.run_at > at:
                break
            self.deliver_next()
        self.advance_to(at)

    def deliver_next(self, flow_id: str | None = None) -> Ran | None:
        """Deliver the task due first (of ``flow_id``), moving the clock to when it is due;
        what the engine did, or None when no task is queued (or the delivery failed)."""
        task = self.queue.due_first(self.key(flow_id) if flow_id is not None else None)
        if task is None:
            return None
        self.advance_to(task.next.run_at)
        payload = self.queue.take(task.next.task_id)
        ran = self.deliver(payload, redelivery=task.next.queue == REDELIVERY_QUEUE)
        if self.duplicate_deliveries:
            self.deliver(payload)  # the copy Cloud Tasks sometimes sends: must be a no-op
        return ran

    def deliver(self, payload: TaskPayload, *, redelivery: bool = False) -> Ran | None:
        """Deliver one task payload (again, if you like), as Cloud Tasks would: a 409, a 5xx
        (a relayflow error escaping the engine, e.g. an unknown flow type within its grace) or
        a crash is delivered again later; None when the delivery failed so. ``redelivery``:
        this delivery retries a failed one (Cloud Tasks' retry count above 0)."""
        try:
            ran = self.engine.run_task(payload, redelivery=redelivery)
        except (Crash, RelayflowError, ConnectionError) as failed:
            self.failed_deliveries.append((payload, failed))
            self._redeliver(payload)
            return None
        if ran is Ran.BUSY:
            self._redeliver(payload)
        return ran

    def advance(self, seconds: float, *, ticks: bool = True) -> None:
        """Move the virtual clock forward without delivering any task, running each schedule
        tick on the way at its time; ``ticks=False``: an outage of the tick job (the next
        ``tick()`` catches up as the schedules' catch-up policies say)."""
        self.advance_to(self.now + timedelta(seconds=seconds), ticks=ticks)

    def advance_to(self, at: datetime, *, ticks: bool = True) -> None:
        """Move the virtual clock to ``at`` (never backwards), running the schedule ticks on
        the way (unless ``ticks=False``)."""
        while ticks and (tick := self._next_tick(at)) is not None:
            self._move_to(tick)
            self.tick()
        self._move_to(at)

    @property
    def scheduler(self) -> Scheduler:
        """The deployed registry's schedules, over ``schedule_states`` and this engine."""
        return Scheduler(self.engine, self.schedule_states, self._registry.schedules, self.clock)

    def tick(self) -> TickReport:
        """Run the schedules' tick job once, now (as ``POST /schedules/tick`` would)."""
        return self.scheduler.tick()

    def schedule(self, name: str) -> ScheduleState:
        """Schedule ``name``'s document: paused or not, last tick handled, last runs."""
        return self.schedule_states.read(name)

    def started_by(self, schedule: str) -> list[str]:
        """The ids of every flow ``schedule`` started (its ticks' and its manual runs'), in
        order of id (a tick's id sorts by its time)."""
        prefix = f"{FLOW_ID_PREFIX}-{schedule}-"
        return sorted(key for key in self.store.docs if key.startswith(prefix))

    def _next_tick(self, upto: datetime) -> datetime | None:
        """The first schedule tick after now and at or before ``upto``."""
        found = [t for s in self._registry.schedules for t in next_ticks(s, self.now, 1)]
        first = min(found, default=None)
        return first if first is not None and first <= upto else None

    def _move_to(self, at: datetime) -> None:
        if at > self.clock.now():
            self.clock.advance((at - self.clock.now()).total_seconds())

    def token(self, flow_id: str, step: str) -> str:
        """The callback token of ``step`` (a callback step that has started)."""
        track = self.flow(flow_id).tracks.get(step)
        if track is None or track.token is None:
            raise AssertionError(f"step {step!r} of {flow_id} has no callback token now")
        return track.token

    def wake_at(self, flow_id: str, step: str) -> datetime:
        """When sleep step ``step`` wakes (a sleep whose wake time is fixed: its first task
        has run)."""
        track = self.flow(flow_id).tracks.get(step)
        if track is None or track.wake_at is None:
            raise AssertionError(f"step {step!r} of {flow_id} is not sleeping now")
        return track.wake_at

    def sleep_tasks(self, flow_id: str, step: str) -> list[NextTask]:
        """Every task made for sleep step ``step``, in order: the one that fixes its wake
        time, then each hop of its wait (a wait past Cloud Tasks' 30 days is chained); a
        name enqueued again (deduplicated) is listed once."""
        key = self.key(flow_id)
        return [
            nxt
            for owner, nxt, outcome in self.queue.ensured
            if owner == key
            and outcome is Enqueued.CREATED
            and nxt.position.kind is TaskKind.SLEEP
            and nxt.position.step == step
        ]

    def complete(
        self,
        token: str,
        output: dict[str, Any] | None = None,
        *,
        error: dict[str, Any] | None = None,
    ) -> CallbackAnswer:
        """Complete a callback token, as ``POST /callbacks`` would."""
        completion = {"error": error} if error is not None else {"output": output or {}}
        return self.engine.complete(token, completion)

    def signal(
        self,
        flow_id: str,
        name: str,
        data: dict[str, Any] | None = None,
        *,
        signal_id: str | None = None,
        by: str = "a test",
        reason: str = "",
        item: int | None = None,
        tenant: str | None = None,
    ) -> SignalAnswer:
        """Send signal ``name`` to a flow, as ``POST /flows/{id}/signals/{name}`` would."""
        return self.engine.signal(
            flow_id, name, data, signal_id=signal_id, by=by, reason=reason, item=item, tenant=tenant
        )

    def cancel(self, flow_id: str, reason: str = "cancelled in a test") -> FlowRecord:
        """Cancel as an operator would."""
        return self.engine.cancel(self.key(flow_id), reason)

    def retry(self, flow_id: str) -> FlowRecord:
        """Retry an ended flow as an operator would (a new generation)."""
        return self.engine.retry(self.key(flow_id))

    def reset(
        self, flow_id: str, step: str, undo: bool = True, reason: str = "", by: str = ""
    ) -> FlowRecord:
        """Run an ended flow again from ``step``, as an operator would (a new generation;
        with ``undo``, what ``step`` and the steps after it did is undone first)."""
        return self.engine.reset(self.key(flow_id), step, undo=undo, reason=reason, by=by)

    def preview_reset(self, flow_id: str, step: str, undo: bool = True) -> Preview:
        """What ``reset`` would do now (its dry run), changing nothing."""
        return self.engine.preview_reset(self.key(flow_id), step, undo=undo)

    def undo(self, flow_id: str, reason: str = "undone again in a test") -> FlowRecord:
        """Undo again what an ended flow left live, as an operator would (a new clean-up)."""
        return self.engine.undo(self.key(flow_id), reason=reason)

    def sweep(self, grace_s: float = 120.0) -> SweepReport:
        """Run the sweeper once."""
        return self.engine.sweep(grace_s=grace_s)

    @property
    def bulk_runner(self) -> BulkRunner:
        """Bulk actions over this engine's flows, as the api and the worker run them."""
        return BulkRunner(self.engine, self.bulk_store, self.store, self.bulk_queue, self.clock)

    def bulk(
        self,
        action: str,
        *,
        reason: str = "a bulk action in a test",
        by: str = "a test",
        rate_per_s: float = DEFAULT_RATE_PER_S,
        dry_run: bool = False,
        step: str | None = None,
        undo: bool = True,
        **wanted: Any,
    ) -> BulkAction:
        """A bulk ``action`` (retry, cancel, or reset to ``step``) over the flows ``wanted``
        matches (the listing's filter: ``flow=``, ``status=``, ``code=``, ``labels=`` ...):
        its dry run, then, unless ``dry_run``, run to its end in virtual time (``run_bulk``).
        The bulk action as it stands; ``bulk_rows(id)`` has each flow's preview and outcome."""
        runner = self.bulk_runner
        made = runner.create(
            action,
            FlowFilter(**wanted),
            reason=reason,
            by=by,
            rate_per_s=rate_per_s,
            step=step,
            undo=undo,
        )
        if dry_run:
            return made
        runner.run(made.id, by=by)
        return self.run_bulk(made.id)

    def run_bulk(self, bulk_id: str, *, max_tasks: int = 100_000) -> BulkAction:
        """Deliver due tasks, the flows' and the bulk action's batches alike, earliest first,
        skipping time ahead, until the bulk action is no longer running (done, paused,
        cancelled); it as it ended. Its flows go on running after (``run()`` ends them)."""
        runner = self.bulk_runner
        for _ in range(max_tasks):
            if runner.get(bulk_id).state is not BulkState.RUNNING:
                return runner.get(bulk_id)
            batch = self.bulk_queue.due_first()
            task = self.queue.due_first()
            if batch is None and task is None:
                raise AssertionError(f"bulk action {bulk_id} is running and has no task")
            if batch is not None and (task is None or batch.run_at <= task.next.run_at):
                self.deliver_batch()
            else:
                self.deliver_next()
        raise AssertionError(f"bulk action {bulk_id} still running after {max_tasks} tasks")

    def deliver_batch(self) -> BatchReport | None:
        """Deliver the batch task due first, moving the clock to when it is due, as the
        worker's ``/tasks/bulk`` would; what the batch did (None: none is queued)."""
        queued = self.bulk_queue.due_first()
        if queued is None:
            return None
        self.advance_to(queued.run_at)
        return self.bulk_runner.run_batch(self.bulk_queue.take(queued.task))

    def deliver_bulk_task(self, task: BulkTask) -> BatchReport:
        """Deliver ``task`` (again, if you like: a duplicate, a redelivery after a crash)."""
        return self.bulk_runner.run_batch(task)

    def bulk_rows(self, bulk_id: str) -> list[BulkRow]:
        """Every row of a bulk action, in order: each flow's preview and what became of it."""
        action = self.bulk_runner.get(bulk_id)
        return [row for n in range(action.chunks) for row in self.bulk_store.rows(bulk_id, n)[0]]

    def deploy(self, registry: Registry | Flow | Iterable[Flow]) -> None:
        """Serve ``registry`` from now on, as a new deployment would: flows in flight keep
        their documents and queued tasks (a rolling upgrade, or removing an old version)."""
        self._registry = _as_registry(registry)
        self.engine = self._build()

    def script(self, step: str, *entries: Entry, flow: str | None = None) -> Scripted:
        """Replace ``step``'s handler (a poll's check) with a script; returns it."""
        handler = scripted(*entries)
        self._replace(flow, step, "run", handler)
        return handler

    def script_undo(self, step: str, *entries: Entry, flow: str | None = None) -> Scripted:
        """Replace ``step``'s compensation with a script; returns it."""
        handler = scripted(*entries)
        self._replace(flow, step, "compensate", handler)
        return handler

    # -- what a test asserts -------------------------------------------------------------

    def flow(self, flow_id: str) -> FlowRecord:
        """The flow's document as stored, by its id (whichever tenant's it is, when only one
        tenant uses the id) or by its key (``FlowRecord.key``)."""
        record = self.store.get(self.key(flow_id))
        if record is None:
            raise AssertionError(f"no flow {flow_id!r}")
        return record

    def opened(self, flow_id: str) -> FlowRecord:
        """The flow's document with its sealed values opened, as its handlers see them (``flow``
        is the document as stored: sensitive fields sealed)."""
        record = self.flow(flow_id)
        shown = self.sealing.shown(record.model_dump(mode="python"), owner_of(record))
        return FlowRecord.model_validate(shown)

    def key(self, flow_id: str) -> str:
        """The key of the flow ``flow_id`` names (an id, or already a key)."""
        if flow_id in self.store.docs:
            return flow_id
        found = self.store.find(flow_id)
        return found[0].key if len(found) == 1 else flow_id

    def calls_of(self, step: str, *, undo: bool = False) -> list[StepContext]:
        """The contexts ``step``'s handler (or, with ``undo``, its compensation) was called
        with, in order."""
        kinds = {TaskKind.COMPENSATE} if undo else set(TaskKind) - {TaskKind.COMPENSATE}
        return [c.context for c in self.calls if c.step == step and c.kind in kinds]

    def value(self, flow_id: str, stored: Any) -> Any:
        """One of the flow's stored values (its ``input``, an ``outputs[step]``, its
        ``result.data``) as a reader is given it (the api's ``?resolve=true``): offloaded
        payloads read back, sensitive fields sealed."""
        return self.engine.loaded(stored, self.flow(flow_id))

    def output(self, flow_id: str, step: str) -> Any:
        """Step ``step``'s output, as the steps after it see it (sensitive fields opened)."""
        record = self.flow(flow_id)
        return self.engine.opened(record.outputs[step], record, "outputs", step)

    def result_data(self, flow_id: str) -> Any:
        """The data of the flow's result, as a client holding the key reads it (offloaded
        payloads read back, sensitive fields opened)."""
        record = self.flow(flow_id)
        assert record.result is not None, f"flow {flow_id!r} has not ended"
        return opened_result(self.sealer, self.value(flow_id, record.result.data), record.key)

    def path(self, flow_id: str) -> list[str]:
        """The flow's history as short lines: ``'register action #0: succeeded'``."""
        return [_line(entry) for entry in self.flow(flow_id).history]

    def breaker(self, dependency: str) -> BreakerState:
        """A dependency's breaker, as stored."""
        return self.breakers.breaker(dependency)[0]

    def versions(self) -> list[VersionUse]:
        """Each registered version and the flows not ended on it, as ``GET /versions``."""
        return version_uses(self.store, self._registry, pairs(self._registry))

    def dropped_by(self, registry: Registry | Flow | Iterable[Flow]) -> list[VersionUse]:
        """What ``relayflow versions check`` would refuse before deploying ``registry``: the
        versions it drops that flows not ended still run on."""
        return dropped(self.versions(), keeps(_as_registry(registry)))

    def results(self, flow_id: str | None = None) -> list[dict[str, Any]]:
        """The result events published (for ``flow_id``), in order."""
        return [e for e in self.events.published if flow_id in (None, e["flow_id"])]

    # -- wiring --------------------------------------------------------------------------

    def _build(self) -> Engine:
        registry = _recorded(self._registry, self.calls)
        # Seals the flows' sensitive values as they enter them (``Kernel.codec``).
        self.sealing = Sealing(registry, self.sealer)
        return Engine(
            registry=registry,
            store=self.store,
            queue=self.queue,
            events=self.events,
            clock=self.clock,
            queues=QueueNames(),
            limits=self.limits,
            tenants=self.tenants,
            breakers=Breakers(
                self.breakers, self.dependencies, self.clock, shards=1, metrics=self.metrics
            ),
            metrics=self.metrics,
            offload=self.offload,
            sealing=self.sealing,
            tracer=self.tracer,
        )

    def _redeliver(self, payload: TaskPayload) -> None:
        again = NextTask(
            queue=REDELIVERY_QUEUE,
            task_id=f"{payload.flow_id}-again-{len(self.queue.spent)}",
            run_at=self.now + timedelta(seconds=REDELIVERY_S),
            position=payload.position,
        )
        self.queue.ensure(payload.flow_id, again, payload.chain)

    def _replace(self, flow: str | None, step: str, role: str, handler: Handler) -> None:
        flows = [f for f in self._registry if flow in (None, f.name)]
        hits = [f for f in flows if f.index_of(step) is not None]
        if not hits:
            raise AssertionError(f"no step {step!r} in {flow or 'any flow'}")
        self._registry = Registry(
            (_with_handler(f, step, role, handler) if f in hits else f for f in self._registry),
            schedules=self._registry.schedules,
        )
        self.engine = self._build()


def _as_registry(registry: Registry | Flow | Iterable[Flow]) -> Registry:
    if isinstance(registry, Registry):
        return registry
    if isinstance(registry, Flow):
        return Registry((registry,))
    return Registry(registry)


def _message(
    flow: str, input: dict[str, Any], flow_id: str | None, deadline_s: float | None
) -> dict[str, Any]:
    body: dict[str, Any] = {"flow": flow, "input": input}
    if flow_id is not None:
        body["flow_id"] = flow_id
    if deadline_s is not None:
        body["deadline_s"] = deadline_s
    return body


def _with_handler(flow: Flow, step: str, role: str, handler: Handler) -> Flow:
    """``flow`` with ``step``'s handler replaced; ``each.charge`` (or a name found only inside
    a ForEach) names an item step."""
    scope, _, inner = step.rpartition(".")
    if not scope and flow.index_of(step) is None:
        scope = next((f.name for f in flow.steps if _runs_inside(f, step)), "")
    if scope:
        each = flow.named(scope)
        inside = _with_handler(REGISTRY.inner(flow, scope), inner, role, handler)
        return _replace_step(flow, REGISTRY.of(each).with_steps(each, inside.steps))
    current = flow.named(step)
    return _replace_step(flow, REGISTRY.of(current).scripted(current, role, handler))


def _runs_inside(outer: Step, step: str) -> bool:
    """Whether ``step`` is one of the steps ``outer`` runs inside it (a ForEach's item steps)."""
    inner = REGISTRY.of(outer).inner(outer)
    return inner is not None and inner.index_of(step) is not None


def _replace_step(flow: Flow, new: Step) -> Flow:
    return replace(flow, steps=tuple(new if s.name == new.name else s for s in flow.steps))


def _recorded(registry: Registry, calls: list[Call]) -> Registry:
    """The registry with every handler wrapped to note its call in ``calls``."""

    def wrap(step: str, kind: TaskKind, handler: Handler) -> Handler:
        def recorded(ctx: StepContext) -> dict[str, Any] | None:
            calls.append(Call(step, kind, ctx))
            return handler(ctx)

        return recorded

    def wrap_step(step: Step) -> Step:
        kind = REGISTRY.of(step)
        inner = kind.inner(step)
        if inner is not None:  # the steps inside it are wrapped one by one
            return kind.with_steps(step, tuple(wrap_step(s) for s in inner.steps))
        return kind.wrapped(step, wrap)

    return Registry(replace(f, steps=tuple(wrap_step(s) for s in f.steps)) for f in registry)


def _line(entry: HistoryEntry) -> str:
    if entry.kind is TaskKind.POLL:
        which = f"poll {entry.poll}"
    elif entry.kind is TaskKind.SLEEP:
        which = f"sleep hop {entry.poll}"
    else:
        which = f"{entry.kind} #{entry.attempt}"
    return f"{entry.step} {which}: {entry.outcome}"

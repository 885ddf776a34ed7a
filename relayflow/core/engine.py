"""The engine: start flows, run the task at a flow's position, sweep, cancel, retry.

Every entry point (the start function, the worker, the poller, the api) is a thin shell around
one Engine method. The engine reads the flow, runs a handler outside any transaction, asks the
planner what comes next, commits that with a compare-and-set that re-checks the position, and only
then enqueues the next task and publishes the result (DESIGN invariants 4 and 5).
"""

from __future__ import annotations

import base64
import contextvars
import dataclasses
import functools
import hashlib
import hmac
import logging
import re
import secrets
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from opentelemetry.trace import Span, SpanKind, Tracer

from relayflow import telemetry
from relayflow.core import admission, foreach, planner
from relayflow.core.admission import Admission
from relayflow.core.clock import Clock
from relayflow.core.dependencies import Breakers, Verdict
from relayflow.core.errors import (
    AmbiguousFlow,
    FlowNotFound,
    InvalidMessage,
    InvalidTransition,
    NotReady,
    PermanentError,
    RetryableError,
    UnknownFlow,
    UnknownVersion,
)
from relayflow.core.flows import (
    ActionStep,
    CallbackStep,
    Flow,
    ForEach,
    Handler,
    IfStep,
    PollStep,
    Registry,
    Step,
    StepContext,
)
from relayflow.core.kinds import REGISTRY, step_at
from relayflow.core.kinds.callback import signal as signalled
from relayflow.core.kinds.foreach import cancel_lane, fanned_out, gathered, lanes_started
from relayflow.core.listing import FlowFilter
from relayflow.core.messages import bounded, parse_start
from relayflow.core.planner import Completed, Failed, Outcome, Plan, QueueNames, Retry, Waiting
from relayflow.core.ports import (
    Change,
    Events,
    Queue,
    Snapshot,
    Store,
    TenantState,
    Unreadable,
    UnreadableFlow,
    UnstorableChange,
)
from relayflow.core.position import (
    FLOW_ID_PATTERN,
    TASK_FLOW_PATTERN,
    Position,
    TaskKind,
    TaskPayload,
    is_document_id,
)
from relayflow.core.putoffs import PutOffs
from relayflow.core.records import (
    Effect,
    FlowRecord,
    NextTask,
    Track,
    event_kind,
    flow_key,
    split_key,
)
from relayflow.core.state import ACTIVE, TERMINAL, Status
from relayflow.core.tenants import DEFAULT_TENANT, Tenants
from relayflow.core.values import UnstorableValue, check_storable
from relayflow.metrics import Metrics

log = logging.getLogger("relayflow.core.engine")
# One step's output; the whole document stays under Firestore's 1 MiB with room to spare.
MAX_OUTPUT_BYTES = 256 * 1024
MAX_DOC_BYTES = 900 * 1024


class Started(StrEnum):
    """What a start message did."""

    STARTED = "started"
    DUPLICATE = "duplicate"
    REJECTED = "rejected"


@dataclass(frozen=True)
class StartResult:
    outcome: Started
    flow_id: str | None = None
    reason: str | None = None


class Ran(StrEnum):
    """What a task delivery did."""

    ADVANCED = "advanced"  # the flow moved on (or ended)
    STALE = "stale"  # not the flow's current position: a duplicate or late task, no-op
    BUSY = "busy"  # another delivery holds the position's claim: try again later (409)
    NO_FLOW = "no flow"  # no such flow document (it ended and expired, or never was): dropped


class Completion(StrEnum):
    """What completing a callback token did."""

    COMPLETED = "completed"  # the waiting step ended with it; the flow moved on
    KEPT = "kept"  # it came before the step's run had committed: kept, applied when it does
    IGNORED = "ignored"  # nothing awaited it (completed twice, late, an ended flow): no change


@dataclass(frozen=True)
class CallbackAnswer:
    outcome: Completion
    reason: str = ""
    flow_id: str | None = None


SweepAction = Callable[[FlowRecord, "SweepReport"], None]
Operation = Callable[[Plan, FlowRecord], FlowRecord]  # an operator's change, planned


@dataclass
class SweepReport:
    """What a sweep found and did."""

    overdue: int = 0
    rescued: int = 0
    admitted: int = 0  # waiting flows given a slot
    ended: int = 0  # could never be settled: ended with a code that says why
    still_queued: int = 0
    unpublished: int = 0
    republished: int = 0
    errors: int = 0


def idempotency_key(record: FlowRecord, position: Position) -> str:
    """The key a handler sends with its external call: one effect per flow, step and effect.

    It names the flow's incarnation (when its document was created), so a flow id reused
    after the old flow's document expired never replays the old flow's effects, and the
    step's effect number, so a retried flow replays an effect that may still be live and
    makes a new one only once the old one was undone. A ForEach item's step names its item
    (``each[7].charge``); its lane shares the flow's id and incarnation, so the flow's undo
    of it sends the key the item sent.
    """
    incarnation = f"{int(record.created_at.timestamp() * 1000):x}"
    suffix = ":undo" if position.kind is TaskKind.COMPENSATE else ""
    name = position.effect_name
    effect = _effect_number(record, name)
    flow_id = record.parent or record.key
    return f"relayflow-{flow_id}-{incarnation}-{name}-e{effect}{suffix}"


def _effect_number(record: FlowRecord, name: str) -> int:
    live = record.live_effect(name)
    return live.n if live is not None else sum(1 for e in record.effects if e.step == name)


@dataclass(frozen=True)
class Limits:
    """The bounds the engine keeps (DESIGN invariant 11), with defaults that fit the topology.

    ``claim_lease_s`` outlives the longest a delivery may run (the steps queue's dispatch
    deadline, 120 s); after that Cloud Tasks counts the attempt as failed and may retry it.
    A handler's time budget is its queue's dispatch deadline less what the commit needs.
    """

    history_limit: int = 200
    retention_s: float = 30 * 24 * 3600.0
    claim_lease_s: float = 150.0
    action_budget_s: float = 100.0
    poll_budget_s: float = 45.0
    # A task of a flow type this deployment does not know is answered 5xx this long after it
    # was due (a rolling deploy may reach a newer instance); then the flow ends UNKNOWN_FLOW.
    unknown_flow_grace_s: float = 900.0
    # A lost task is re-enqueued at most this many times for one try of one step.
    max_rescues: int = 5
    # A flow the sweeper could not settle is not looked at again for this long, so a few bad
    # flows never keep it from the rest.
    sweep_backoff_s: float = 600.0
    # Run a claimed step due the moment its predecessor commits in the same request (see
    # ``Engine._onward``); off, every step is delivered as its own task.
    continue_inline: bool = False
    # An undo that cannot be done now (its dependency down) goes on after the flow has
    # ended, as its clean-up, on a long backoff, for this long (0: recorded as failed).
    undo_window_s: float = 24 * 3600.0
    undo_initial_s: float = 30.0
    undo_max_interval_s: float = 3600.0


class Engine:
    """Runs flows from a registry against a store, a task queue and an event publisher."""

    def __init__(
        self,
        *,
        registry: Registry,
        store: Store,
        queue: Queue,
        events: Events,
        clock: Clock,
        queues: QueueNames | None = None,
        limits: Limits | None = None,
        tenants: Tenants | None = None,
        breakers: Breakers | None = None,
        tracer: Tracer | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self._registry = registry
        self._store = store
        self._queue = queue
        self._events = events
        self._clock = clock
        self._queues = queues or QueueNames()
        self._limits = limits or Limits()
        self._admission = Admission(store, tenants or Tenants())
        # Dependencies' breakers and retry budgets (None: steps call what they call, unguarded).
        self._breakers = breakers
        # What this process put off for each dependency: brought forward when its breaker closes.
        self._put_offs = PutOffs()
        self._tracer = tracer  # None: tracing is off
        self._metrics = metrics or Metrics()  # the base class records nothing

    # -- start ---------------------------------------------------------------------------

    def start(
        self,
        data: bytes,
        *,
        message_id: str,
        attributes: dict[str, str],
        tenant: str = DEFAULT_TENANT,
    ) -> StartResult:
        """Start the flow a message asks for, once, however often the message arrives.

        ``tenant``: whose topic the message came by. Publishers are bound to tenants by IAM on
        their topics (each tenant named in the tenants policy has its own; ``flow-requests``
        is the default tenant's), so the topic, not the message, says whose flow it is: a
        message naming another tenant is rejected, and none is given a priority above its
        tenant's policy.

        A malformed message is recorded in ``rejected`` and reported, never raised: raising
        would make Pub/Sub redeliver something that can never succeed. Infrastructure errors
        do raise, so that Pub/Sub redelivers.

        The start span continues the publisher's trace (``googclient_traceparent``) and is
        the root of everything the flow does later.
        """
        with telemetry.span(
            self._tracer,
            "start flow",
            traceparent=attributes.get(telemetry.PUBSUB_TRACEPARENT),
            kind=SpanKind.CONSUMER,
            attributes={"message_id": message_id},
        ) as span:
            result = self._start(data, message_id=message_id, attributes=attributes, bound=tenant)
            span.set_attribute("outcome", result.outcome.value)
            if result.flow_id:
                span.set_attribute("flow_id", result.flow_id)
            return result

    def _start(
        self, data: bytes, *, message_id: str, attributes: dict[str, str], bound: str
    ) -> StartResult:
        try:
            message, flow = parse_start(data, self._registry, attributes)
            tenant = _tenant_of(message.tenant, bound)
        except InvalidMessage as exc:
            self._reject(data, message_id, attributes, exc.reason)
            self._metrics.message_rejected("", "INVALID_MESSAGE")
            return StartResult(Started.REJECTED, reason=exc.reason)
        flow_id = message.flow_id or safe_id(message_id)
        policy = self._admission.tenants.policy(tenant)
        record = planner.new_record(
            self._plan(flow),
            flow_id=flow_id,
            input=message.input,
            message_id=message_id,
            deadline_s=message.deadline_s,
            tenant=tenant,
            priority=_capped(message.priority, policy.priority),
            waiting=self._admission.must_wait(tenant),
        ).model_copy(update={"trace": telemetry.current_traceparent()})
        if not self._store.create(record):
            return self._duplicate(record, data, message_id, attributes)
        self._metrics.flow_started(flow.name, self._admission.tenants.label(tenant))
        self._settle(record)
        if record.admission == "waiting" and not self._admission.seems_full(tenant):
            self._admit(tenant)  # in order with the others waiting
        log.info("flow started", extra={"flow_id": flow_id, "flow": flow.name, "tenant": tenant})
        return StartResult(Started.STARTED, flow_id=flow_id)

    def _duplicate(
        self, record: FlowRecord, data: bytes, message_id: str, attributes: dict[str, str]
    ) -> StartResult:
        """A start for a flow id that exists: the same request again, or a conflicting one."""
        existing = self._store.get(record.key)
        if existing is None:  # created and deleted meanwhile; Pub/Sub will redeliver
            raise RuntimeError(f"flow {record.flow_id} exists and does not")
        if (existing.flow, existing.input) != (record.flow, record.input):
            reason = (
                f"flow_id {record.flow_id!r} already names a {existing.flow!r} flow with a "
                "different input; choose a new flow_id"
            )
            self._reject(data, message_id, attributes, reason)
            self._metrics.message_rejected(existing.flow, "FLOW_ID_CONFLICT")
            return StartResult(Started.REJECTED, flow_id=record.flow_id, reason=reason)
        self._settle(existing)  # the first start may have died before enqueueing
        if existing.admission == "waiting":
            self._admit(existing.tenant)
        log.info("duplicate start", extra={"flow_id": record.flow_id, "message_id": message_id})
        return StartResult(Started.DUPLICATE, flow_id=record.flow_id)

    def _reject(
        self, data: bytes, message_id: str, attributes: dict[str, str], reason: str
    ) -> None:
        reason = bounded(reason)
        log.warning("start message rejected", extra={"message_id": message_id, "reason": reason})
        self._store.reject(
            safe_id(message_id),
            {
                "message_id": message_id,
                "reason": reason,
                "data_base64": base64.b64encode(data[:16384]).decode("ascii"),
                "data_truncated": len(data) > 16384,
                # As pairs, not a map: Firestore refuses some keys Pub/Sub allows (``__x__``).
                "attributes": [{"key": k, "value": v} for k, v in sorted(attributes.items())],
                "rejected_at": self._clock.now(),
                "expire_at": self._clock.now() + timedelta(seconds=self._limits.retention_s),
            },
        )

    # -- tasks ---------------------------------------------------------------------------

    def run_task(self, payload: TaskPayload, *, redelivery: bool = False) -> Ran:
        """Run the task at ``payload.position`` if it is the flow's current position.

        ``redelivery``: Cloud Tasks says this delivery retries one that failed (its
        X-CloudTasks-TaskRetryCount is above 0), not a first delivery or a duplicate of one.
        """
        found = self._read(payload.flow_id)
        if found is None:
            log.warning("task for unknown flow", extra={"flow_id": payload.flow_id})
            return Ran.NO_FLOW
        request = _Request(self._clock.now(), self._budget_s(payload.position.kind))
        token = _REQUEST.set(request)
        try:
            with telemetry.log_fields(flow_id=payload.flow_id, tenant=found.record.tenant):
                return self._run_found(found, payload, redelivery)
        finally:
            _REQUEST.reset(token)

    def _run_found(self, found: Snapshot, payload: TaskPayload, redelivery: bool = False) -> Ran:
        key = _track_of(found.record, payload.position)
        if key is None:
            if redelivery and _ended_by(found.record, payload.position):
                # The delivery that ended the flow failed after its commit, which marked the
                # result event sent: it may not have gone out. Again, then (subscribers
                # dedupe on flow_id and generation).
                self._publish_result(found.record, None, marked=True)
            self._settle(found.record)
            return Ran.STALE
        found = dataclasses.replace(found, record=found.record.focused(key))
        if payload.position.kind is TaskKind.ADMIT:
            return self._run_admit(found)
        try:
            flow, gone = self._definition(found.record)
        except UnknownFlow:
            return self._unknown_type(found, payload.position)
        if self._admission.paused(found.record.tenant):
            later = self._clock.now() + timedelta(seconds=admission.PAUSE_RECHECK_S)
            return self._put_off(found, "its tenant is paused", later)
        if found.record.is_lane:
            return self._run_lane_task(found, flow, gone)
        if gone and payload.position.kind is not TaskKind.COMPENSATE:
            log.error("flow version no longer registered", extra={"flow_id": payload.flow_id})
            return self._end(found, payload.position, self._plan(flow), gone)
        mismatch = _definition_mismatch(flow, payload.position)
        if mismatch:
            log.error("flow definition changed", extra={"flow_id": payload.flow_id})
            return self._end(found, payload.position, self._plan(flow), mismatch)
        return self._dispatch(found, flow)

    def _dispatch(self, found: Snapshot, flow: Flow) -> Ran:
        """Run the focused task by its kind: the engine's own, read-only, or claimed."""
        kind = found.record.position.kind
        if kind in _FOREACH:
            return self._run_foreach_task(found, flow, kind)
        return self._run_step(found, flow)

    def _run_step(self, found: Snapshot, flow: Flow) -> Ran:
        """Run a step's handler: first asking its dependency's breaker and budget, which may
        put it off; then read-only, or under a claim."""
        verdict = self._ask_dependency(found.record, flow)
        if verdict is not None and not verdict.run:
            assert verdict.until is not None
            remember = functools.partial(self._remember_put_off, verdict.dependency)
            # An undo put off because its dependency is down does not hold the flow's end:
            # it goes on as the flow's clean-up.
            return self._put_off(
                found, verdict.detail, verdict.until, then=remember, hand_over=True
            )
        if found.record.position.kind in _UNCLAIMED:  # read only: no claim
            position = found.record.position
            outcome = self._execute(flow, found.record, verdict)
            return self._commit(found, position, flow, outcome)
        return self._run_claimed(found, flow, verdict)

    def _ask_dependency(self, record: FlowRecord, flow: Flow) -> Verdict | None:
        """The breaker's verdict for the step at ``record``'s position, if it names a
        dependency and breakers are on (None: nothing to ask)."""
        if self._breakers is None:
            return None
        pos = record.position
        step = step_at(flow, pos, REGISTRY)
        dependency = getattr(step, "dependency", None)
        if dependency is None:
            return None
        key = f"{record.key}:{pos.label()}"
        # A poll after a failed poll is the poll the schedule makes anyway, not extra traffic:
        # only an action's (or an undo's) second and later tries spend the retry budget.
        retry = pos.attempt > 0 and pos.kind is not TaskKind.POLL
        verdict = self._breakers.check(
            dependency,
            retry=retry,
            deferrals=pos.deferral,
            key=key,
            natural_s=_next_try_s(step, pos, key),
        )
        self._bring_forward_closed_elsewhere()
        return verdict

    def _bring_forward_closed_elsewhere(self) -> None:
        """Another instance closed a breaker since we last looked: what we put off for it
        comes forward too (each instance remembers only its own)."""
        assert self._breakers is not None
        for closed in self._breakers.closed_elsewhere():
            self._bring_forward(closed)

    # -- tenants -------------------------------------------------------------------------

    def _admit(self, tenant: str) -> int:
        """Admit ``tenant``'s waiting flows while it has room; how many."""
        plan_for = functools.partial(_plan_of, self)
        return self._admission.admit(plan_for, tenant, self._clock.now(), self._settle)

    def _run_admit(self, found: Snapshot) -> Ran:
        """A waiting flow's retry for a slot: the retry is over; admit what there is room for."""
        record = found.record
        self._store.change(record.key, planner.admission_tried)
        self._admit(record.tenant)
        return Ran.ADVANCED

    def _put_off(
        self,
        found: Snapshot,
        why: str,
        until: datetime,
        *,
        then: Callable[[Snapshot], Ran | None] | None = None,
        hand_over: bool = False,
    ) -> Ran:
        """Put the focused task off until ``until`` (a new task then, no attempt spent).
        ``then``: what runs once that is committed, before it is settled; ``hand_over``: see
        ``planner.defer``."""
        position = found.record.position
        plan = self._plan(self._planning_flow(found.record))

        def deferred(latest: FlowRecord) -> FlowRecord | None:
            current = _focused_at(latest, position)
            if current is None:
                return None
            planned = planner.defer(plan, current, until=until, why=why, hand_over=hand_over)
            marked = _marked(planned)  # a hand-over ends the flow: its result is published
            marks[:] = [marked is not planned]
            return marked

        marks: list[bool] = []
        return self._write(found, deferred, then=then, marks=marks)

    def _remember_put_off(self, dependency: str, committed: Snapshot) -> None:
        """Remember the task of a step just put off for ``dependency``'s breaker, to bring it
        forward when the breaker closes (returns None: the commit is settled as usual)."""
        nxt = committed.record.next
        if nxt is not None and nxt.position.deferral > 0:
            self._put_offs.add(dependency, nxt, self._clock.now())

    def pause_tenant(self, tenant: str, *, by: str = "", reason: str = "") -> TenantState:
        """Stop dispatching ``tenant``'s flows (their tasks are put off) and admitting new ones."""
        return self._admission.set_paused(tenant, True, by=by, reason=reason)

    def resume_tenant(self, tenant: str, *, by: str = "", reason: str = "") -> TenantState:
        """Let ``tenant``'s flows go on where they were, and admit its waiting ones."""
        state = self._admission.set_paused(tenant, False, by=by, reason=reason)
        self._admit(tenant)
        return state

    def _bring_forward(self, dependency: str) -> int:
        """The breaker of ``dependency`` closed: run now (Cloud Tasks RunTask) the tasks this
        process put off for it that would otherwise come back later than they need to (see
        ``PutOffs.take``: those put off since the breaker last opened, and those due more
        than ten seconds from now). How many ran. Side by side: one after another, a few
        hundred would hold this request for seconds. Best effort: each comes back on its
        own anyway."""
        began = time.perf_counter()
        assert self._breakers is not None
        since = self._breakers.last_opened(dependency)
        tasks = self._put_offs.take(dependency, since=since, now=self._clock.now())
        brought = 0
        if tasks:
            failed = threading.Event()  # the queue failing once: the rest are not tried
            run = functools.partial(self._run_now, failed=failed)
            with ThreadPoolExecutor(max_workers=16) as pool:
                brought = sum(pool.map(run, tasks))
        extra = {
            "dependency": dependency,
            "brought_forward": brought,
            "took_s": round(time.perf_counter() - began, 3),
        }
        log.info("breaker closed", extra=extra)
        return brought

    def _run_now(self, task: NextTask, *, failed: threading.Event) -> bool:
        """RunTask ``task`` unless the queue already failed in this bring-forward: each call
        to a queue that is down would hold this request for its whole timeout, and every task
        left comes back on its own at its time."""
        if failed.is_set():
            return False
        try:
            return self._queue.run_now(task)
        except Exception:
            failed.set()
            log.warning("could not bring a put-off task forward", exc_info=True)
            return False

    def breaker_views(self) -> list[dict[str, Any]]:
        """Every dependency's breaker: state, window counts, budget, p95, transitions."""
        if self._breakers is None:
            return []
        return self._breakers.views(named=_dependencies_of(self._registry))

    def tenant_views(self) -> list[dict[str, Any]]:
        """Every tenant with a policy or a state: its limits, paused or not, flows waiting."""
        names = set(self._admission.tenants.tenants) | {
            s.tenant for s in self._store.tenant_states()
        }
        views = []
        for name in sorted(names | {DEFAULT_TENANT}):
            policy = self._admission.tenants.policy(name)
            state = self._store.tenant_state(name)
            counts = self._store.count_by_status(FlowFilter(tenant=name))
            waiting = self._store.count_waiting(name)
            views.append(
                {
                    "tenant": name,
                    **policy.model_dump(),
                    "paused": policy.paused or state.paused,
                    "paused_by": state.by,
                    "reason": state.reason,
                    "waiting": waiting,
                    "running": sum(counts[s] for s in ACTIVE) - waiting,
                }
            )
        return views

    # -- ForEach -------------------------------------------------------------------------

    def _run_lane_task(self, found: Snapshot, flow: Flow, gone: str) -> Ran:
        """A task of a ForEach lane: run like a flow's, with the item steps as definition. A
        lane whose flow's definition no longer fits is stopped: the flow ends by its own task."""
        record = found.record
        assert record.scope is not None
        items = foreach.item_flow(flow, record.scope)
        mismatch = gone or _definition_mismatch(flow, record.position)
        if mismatch:
            stopped = self._store.change(
                record.key, lambda lane: cancel_lane(self._plan(items), lane)
            )
            return Ran.ADVANCED if stopped else Ran.STALE
        return self._run_step(found, items)

    def _run_foreach_task(self, found: Snapshot, flow: Flow, kind: TaskKind) -> Ran:
        position = found.record.position
        if kind is TaskKind.JOIN:
            joined, left = foreach.join(self._store, found)
            return self._commit(found, position, flow, joined, adopt=left)
        if kind is TaskKind.GATHER:
            effects = foreach.gather(self._store, self._plan(flow), found.record)
            return self._write(
                found,
                lambda latest: _applied(latest, position, self._plan(flow), effects),
            )
        return self._fan_out(found, flow)

    def _fan_out(self, found: Snapshot, flow: Flow) -> Ran:
        """List the ForEach's items, record the fan-out, start its lanes, then end its task."""
        record = found.record
        scope = record.position.step
        each = flow.named(scope)
        assert isinstance(each, ForEach)
        if record.tracks[scope].fanout is None:
            try:
                items = foreach.list_items(each, self._context(flow, record))
            except (foreach.BadItems, Exception) as exc:
                failed = Failed(PermanentError(f"{type(exc).__name__}: {exc}", code="BAD_ITEMS"))
                return self._commit(found, record.position, flow, failed)
            plan = self._plan(flow)
            written = self._store.change_versioned(
                record.key,
                lambda latest: _fanned(latest, record.position, plan, items),
            )
            if written is None:
                return Ran.STALE
            found = written
            if found.record.tracks.get(scope) is None:  # no items: the ForEach is done
                self._settle(found.record, version=found)
                return Ran.ADVANCED
        return self._start_lanes(found, flow, scope)

    def _start_lanes(self, found: Snapshot, flow: Flow, scope: str) -> Ran:
        record = found.record.focused(scope)
        each = flow.named(scope)
        assert isinstance(each, ForEach)
        items = foreach.list_items(each, self._context(flow, record))
        item_plan = self._plan(each.item_flow)
        for lane in foreach.start_lanes(self._store, item_plan, record, scope, items):
            self._settle(lane)
        position = record.position
        return self._write(
            Snapshot(record, found.version),
            lambda latest: _started(latest, position),
        )

    def _report_lane(self, lane: FlowRecord) -> None:
        """Tell a lane's flow what the lane has not told it yet (items failed, lane ended)."""
        try:
            parent_flow = self._definition(lane)[0]
        except UnknownFlow:
            return  # the flow ends by its own task
        written = foreach.report(self._store, self._plan(parent_flow), lane)
        if written is not None:
            self._settle(written)
        foreach.mark_reported(self._store, lane)

    def _run_claimed(self, found: Snapshot, flow: Flow, verdict: Verdict | None = None) -> Ran:
        """An action or compensation: claim the position for this delivery, run the handler,
        commit only if the claim is still ours (invariant 4)."""
        holder = uuid.uuid4().hex
        claimed = self._claim(found, flow, holder)
        if not isinstance(claimed, Snapshot):
            return claimed
        if not planner.holds(claimed.record, holder):  # out of tries: the claim ended the step
            self._settle(claimed.record, version=claimed)
            return Ran.ADVANCED
        outcome = self._execute(flow, claimed.record, verdict)
        try:
            return self._commit(claimed, found.record.position, flow, outcome, holder=holder)
        except Exception:
            self._release(found.record.key, holder)
            raise

    def _claim(self, found: Snapshot, flow: Flow, holder: str) -> Snapshot | Ran:
        """Lease the current position to ``holder`` before a side effect (invariant 4); a step
        that has been delivered as often as its retries allow is ended instead."""
        position = found.record.position
        plan = self._plan(flow)

        def take(latest: FlowRecord) -> FlowRecord | None:
            current = _focused_at(latest, position)
            if current is None or planner.is_claimed(plan, current):
                return None
            claimed = planner.claim(
                plan, current, lease_s=self._limits.claim_lease_s, holder=holder
            )
            if planner.exhausted(plan, claimed):
                return planner.crashed(plan, claimed)
            return claimed

        taken = self._store.change_versioned(found.record.key, take, start=found)
        if taken is not None:
            return taken
        latest = self._store.read(found.record.key)
        if latest is None:
            return Ran.NO_FLOW
        if _track_of(latest.record, position) is not None:
            log.info("position busy", extra={"flow_id": found.record.flow_id})
            self._metrics.claim_conflict(found.record.flow, position.step)
            return Ran.BUSY  # another delivery is running it: come back later
        self._settle(latest.record)
        return Ran.STALE

    def _release(self, flow_id: str, holder: str) -> None:
        """Give up a claim whose commit failed, so the retry need not wait out the lease.
        Best effort: if the store is down, the lease runs out instead."""
        try:
            self._store.change(flow_id, lambda current: planner.release(current, holder))
        except Exception:
            log.warning("could not release a claim", extra={"flow_id": flow_id}, exc_info=True)

    def _commit(
        self,
        found: Snapshot,
        position: Position,
        flow: Flow,
        outcome: Outcome,
        *,
        holder: str | None = None,
        adopt: list[Effect] | None = None,
    ) -> Ran:
        """Commit what follows ``outcome`` if ``position`` is still current (and, for a claimed
        step, the claim is still ``holder``'s); then settle. The plan is made after the handler
        ran, so the history and the next deadline count from when it finished. ``adopt``: a
        ForEach's join takes over the undos its lanes left to the flow."""
        plan = self._plan(flow)
        onward = self._onward(found.record, flow, plan, outcome)
        lease_s = self._limits.claim_lease_s

        def next_record(latest: FlowRecord) -> FlowRecord | None:
            current = _focused_at(latest, position)
            if current is None:
                return None
            if holder is not None and not planner.holds(current, holder):
                return None  # our lease ran out and another delivery took the step over
            if adopt:
                current = planner.adopted(current, adopt)
            planned = _fitting(plan, current, planner.after(plan, current, outcome))
            if onward is not None:
                planned = onward.apply(plan, planned, lease_s=lease_s)
            marked = _marked(planned)
            marks[:] = [marked is not planned]
            return marked

        marks: list[bool] = []
        then = None if onward is None else functools.partial(self._go_on, flow, onward)
        return self._write(found, next_record, marks=marks, then=then)

    def _onward(
        self, record: FlowRecord, flow: Flow, plan: Plan, outcome: Outcome
    ) -> _Onward | None:
        """Whether the claimed step that ``outcome`` leads to, if it is due at once, runs in
        this request (its claim taken in this commit) rather than as a task of its own.

        Only in a task's request that has used under a quarter of its budget, for a flow of
        one track (not a lane), admitted, its tenant not paused; the step's breaker is asked
        first, and if it says not now, the step is put off in this same commit. Invariant 4
        holds: the claim is taken by a conditional write, as a delivery's claim is. Invariant
        5: if this request dies, the task it came from is delivered again and finds the
        flow moved on, and settling it makes the step's task (the sweeper would too); that
        task waits out the claim's lease, as it would for a dead delivery of its own.
        """
        request = _REQUEST.get()
        if not self._limits.continue_inline or request is None:
            return None
        left_s = request.budget_s - (self._clock.now() - request.began).total_seconds()
        if left_s < request.budget_s * (1 - CONTINUE_WITHIN):
            return None
        if record.is_lane or len(record.tracks) != 1 or self._admission.paused(record.tenant):
            return None
        preview = planner.after(plan, record, outcome)
        if not _runs_now(preview, plan.now):
            return None
        verdict = self._ask_dependency(preview, flow)
        if verdict is not None and not verdict.run:
            return _Onward(holder=None, verdict=verdict, budget_s=0.0)
        budget_s = min(self._budget_s(preview.position.kind), left_s)
        return _Onward(holder=uuid.uuid4().hex, verdict=verdict, budget_s=budget_s)

    def _go_on(self, flow: Flow, onward: _Onward, committed: Snapshot) -> Ran | None:
        """Run the step this commit claimed for ``onward`` (None: it claimed none). Its task
        is not made: this request is its delivery."""
        holder = onward.holder
        if holder is None:
            if onward.verdict is not None and not onward.verdict.run:
                self._remember_put_off(onward.verdict.dependency, committed)
            return None
        if not planner.holds(committed.record, holder):
            return None
        record = committed.record
        if not planner.is_claimed(self._plan(flow), record):
            return None
        outcome = self._execute(flow, record, onward.verdict, budget_s=onward.budget_s)
        try:
            return self._commit(committed, record.position, flow, outcome, holder=holder)
        except Exception:
            self._release(record.key, holder)
            raise

    def _end(self, found: Snapshot, position: Position, plan: Plan, why: str) -> Ran:
        """End a flow whose definition no longer fits it: DEFINITION_CHANGED, undone with the
        newest version's compensations if its own version is gone."""

        def ended(latest: FlowRecord) -> FlowRecord | None:
            current = _focused_at(latest, position)
            if current is None:
                return None
            if current.version != plan.flow.version:
                return planner.definition_gone(plan, current, message=why)
            return planner.abort(plan, current, code="DEFINITION_CHANGED", message=why)

        return self._write(found, ended)

    def _unknown_type(self, found: Snapshot, position: Position) -> Ran:
        """A flow whose type no deployed version knows: 5xx for a grace period (a rolling
        deploy may still reach an instance that knows it), then FAILED (UNKNOWN_FLOW)."""
        record = found.record
        due = record.next_run_at or record.updated_at
        waited_s = (self._clock.now() - due).total_seconds()
        if waited_s < self._limits.unknown_flow_grace_s:
            raise UnknownFlow(
                f"flow {record.flow_id} is a {record.flow!r} flow, which this deployment does "
                f"not run; retried for {self._limits.unknown_flow_grace_s:.0f}s after it was due"
            )
        log.error("flow type not deployed", extra={"flow_id": record.flow_id})
        plan = self._plan(None)
        message = f"no deployed version runs {record.flow!r} flows"

        def ended(latest: FlowRecord) -> FlowRecord | None:
            current = _focused_at(latest, position)
            if current is None:
                return None
            return planner.unknown_flow(plan, current, message=message)

        return self._write(found, ended)

    def _write(
        self,
        found: Snapshot,
        change: Change,
        *,
        marks: list[bool] | None = None,
        then: Callable[[Snapshot], Ran | None] | None = None,
    ) -> Ran:
        """Write ``change`` starting from ``found``; settle what follows it. ``marks``: what
        ``change`` says of its last call — whether it marked the result sent (``_marked``);
        ``then``: what runs next in this request instead of settling, if it says so."""
        try:
            committed = self._store.change_versioned(found.record.key, change, start=found)
        except UnstorableChange as refused:
            return self._refused(found, refused)
        if committed is None:
            latest = self._store.get(found.record.key)
            if latest is not None:
                self._settle(latest)
            return Ran.STALE
        if then is not None:
            went = then(committed)
            if went is not None:
                return went
        self._settle(committed.record, version=committed, marked=bool(marks and marks[-1]))
        return Ran.ADVANCED

    def _refused(self, found: Snapshot, refused: UnstorableChange) -> Ran:
        """The store refused the write for good (too large, too many index entries, invalid):
        retrying it would fail for ever, so the flow ends FAILED (COMMIT_REFUSED), recording
        only that — a small write that the store takes."""
        log.error("commit refused", extra={"flow_id": found.record.flow_id, "error": str(refused)})
        plan = self._plan(None)
        position = found.record.position
        message = f"the store refused the flow's next state: {refused}"[:1000]

        def ended(latest: FlowRecord) -> FlowRecord | None:
            current = _focused_at(latest, position)
            if current is None:
                return None
            return planner.abort(plan, current, code="COMMIT_REFUSED", message=message)

        committed = self._store.change_versioned(found.record.key, ended)
        if committed is not None:
            self._settle(committed.record, version=committed)
        return Ran.ADVANCED

    def _read(self, flow_id: str) -> Snapshot | None:
        """The flow as stored; a document that no longer parses is ended FAILED (UNREADABLE)
        and its task dropped, since no task could ever run it."""
        try:
            return self._store.read(flow_id)
        except UnreadableFlow as unreadable:
            log.error("unreadable flow", extra={"flow_id": flow_id, "error": str(unreadable)})
            self._store.fail_unreadable(flow_id, reason=str(unreadable), now=self._clock.now())
            return None

    def _context(
        self, flow: Flow, record: FlowRecord, budget_s: float | None = None
    ) -> StepContext:
        """What a handler is told: the focused track's step, its try, its budget."""
        pos = record.position
        track = record.tracks.get(record.focus or "")
        outputs = record.outputs
        if track is not None and track.sent is not None:  # a callback's check sees what it sent
            outputs = {**outputs, pos.step: track.sent}
        effect = record.live_effect(pos.effect_name)
        if pos.kind is TaskKind.COMPENSATE and effect is not None and effect.output is not None:
            outputs = {**outputs, pos.step: effect.output}  # what the action answered
        index = record.item_index
        item = None if index is None else record.items[record.cursor]["item"]
        if pos.scope is not None and not record.is_lane:  # an item's undo, run by its flow
            index, item = pos.item, effect.item if effect is not None else None
        return StepContext(
            # The caller's id (a lane's item sees its flow's), not the key.
            flow_id=split_key(record.parent)[1] if record.parent else record.flow_id,
            flow=record.flow,
            step=pos.step,
            input=record.input,
            outputs=outputs,
            idempotency_key=idempotency_key(record, pos),
            attempt=pos.attempt,
            poll=pos.poll,
            version=record.version,
            generation=pos.generation,
            action_key=idempotency_key(record, pos.model_copy(update={"kind": TaskKind.ACTION})),
            deadline=self._clock.now() + timedelta(seconds=budget_s or self._budget_s(pos.kind)),
            clock=self._clock.now,
            callback_token=_token_of(track, effect, pos),
            item=item,
            item_index=index,
        )

    def _execute(
        self,
        flow: Flow,
        record: FlowRecord,
        verdict: Verdict | None = None,
        *,
        budget_s: float | None = None,
    ) -> Outcome:
        pos = record.position
        handler = _handler_for(step_at(flow, pos, REGISTRY), pos.kind)
        context = self._context(flow, record, budget_s)
        name = f"{pos.kind.value} {pos.step}"
        with telemetry.span(self._tracer, name, attributes=_span_attributes(record)) as span:
            called_at = self._clock.now()  # the breaker's latency: on the injectable clock
            began = time.perf_counter()
            outcome = _call(handler, context, extra={"flow_id": record.flow_id, "at": pos.label()})
            _trace_outcome(span, outcome)
        elapsed_s = time.perf_counter() - began
        self._metrics.step_ran(record.flow, pos, _outcome_name(outcome), elapsed_s)
        if verdict is not None and self._breakers is not None:
            # A retryable error is the dependency failing; anything else is an answer.
            latency_s = (self._clock.now() - called_at).total_seconds()
            ok = not isinstance(outcome, Retry)
            if self._breakers.record(verdict, ok=ok, latency_s=latency_s):
                self._bring_forward(verdict.dependency)
            self._bring_forward_closed_elsewhere()
        if isinstance(outcome, Retry):
            self._metrics.step_retried(record.flow, pos.step, outcome.error.code)
        return outcome

    def _budget_s(self, kind: TaskKind) -> float:
        limits = self._limits
        polled = kind in (TaskKind.POLL, TaskKind.WAIT)
        return limits.poll_budget_s if polled else limits.action_budget_s

    def _settle(
        self, record: FlowRecord, *, version: Snapshot | None = None, marked: bool = False
    ) -> None:
        """Make sure what must follow a committed record has happened (safe to repeat).

        An active flow needs its next task to exist; a terminal one needs its result event.
        Both are idempotent: the task name dedups, and ``result_published`` is remembered.
        Both happen in the flow's trace, whoever settles it (a task, the sweeper, an operator).
        ``version``, the snapshot just written, spares the publish mark a read; ``marked``:
        that write ended the flow and marked its result sent, so it is published here.
        """
        if record.is_lane and foreach.news(record) is not None:
            self._report_lane(record)
        if record.status in TERMINAL and record.slot is not None:  # room for the next waiting
            plan_for = functools.partial(_plan_of, self)
            self._admission.pass_on(plan_for, record, self._clock.now(), self._settle)
        with telemetry.joined(record.trace):
            if record.status in ACTIVE or record.cleaning:  # a clean-up has tasks too
                for track in record.tracks.values():
                    if track.next is not None:
                        self._queue.ensure(record.key, track.next)
            # A lane's end is news for its flow, not a result event.
            if record.status in TERMINAL and record.result and not record.is_lane:
                if not record.result_published:
                    self._publish_result(record, version)
                elif marked:
                    self._publish_result(record, version, marked=True)

    def _publish_result(
        self, record: FlowRecord, version: Snapshot | None, *, marked: bool = False
    ) -> None:
        """Publish the flow's result event, then mark it sent — unless the commit that ended
        the flow ``marked`` it already (see ``_marked``): then a failed publish unmarks it, so
        the sweeper sends it, before the error makes Cloud Tasks deliver the task again."""
        attributes = {"flow_id": record.flow_id, "status": str(record.status)}
        try:
            with telemetry.span(
                self._tracer, "publish result", kind=SpanKind.PRODUCER, attributes=attributes
            ):
                self._events.publish_result(record)
        except Exception:
            if marked:
                self._unmark(record)
            raise
        if marked:
            if version is not None:  # the commit just made: counted once, here
                self._count_end(record)
            return
        # Counted by whoever marks it: once per generation, however often it was settled.
        if self._store.mark_published(record.key, record.position.generation, start=version):
            self._count_end(record)

    def _count_end(self, record: FlowRecord) -> None:
        """Count what the event just published announced: the flow's end, or its clean-up's."""
        if event_kind(record) == "cleanup":
            tenant = self._admission.tenants.label(record.tenant)
            self._metrics.cleanup_ended(record, tenant)
            if record.cleanup is not None and record.cleanup.left:
                log.error(
                    "clean-up abandoned",
                    extra={"flow_id": record.flow_id, "left": record.cleanup.left},
                )
        else:
            self._metrics.flow_ended(record)

    def _unmark(self, record: FlowRecord) -> None:
        generation = record.position.generation
        try:
            self._store.change(
                record.key, functools.partial(planner.unpublished, generation=generation)
            )
        except Exception:  # the store is down too: the task's redelivery publishes it
            log.warning("could not unmark a result", extra={"flow_id": record.flow_id})

    # -- callbacks -----------------------------------------------------------------------

    def complete(
        self,
        token: str,
        completion: dict[str, Any],
        *,
        visible: Callable[[str], bool] | None = None,
    ) -> CallbackAnswer:
        """Complete a callback token with ``{"output": {...}}`` or ``{"error": {...}}``.

        A token is one-use: completed twice, after its step timed out, or for an ended flow,
        it changes nothing and the answer says why. ``visible`` (a caller's tenant scope: tenant
        in, whether the caller may see it): a token of a flow whose tenant it does not admit
        is answered exactly as a token no flow has, so its answer tells nothing of the flow.
        """
        key = token.rpartition(".")[0]  # a flow's key, or a ForEach lane's
        if not re.fullmatch(TASK_FLOW_PATTERN[1:-1], key) or not is_document_id(key):
            return CallbackAnswer(Completion.IGNORED, "not a callback token")
        flow_id = split_key(key)[1]  # what the answer names: the caller's id, not the key
        found = self._read(key)
        if found is None or (visible is not None and not visible(found.record.tenant)):
            return CallbackAnswer(Completion.IGNORED, "no flow has this token", flow_id)
        track = _track_with(found.record, token)
        if track is None:
            return CallbackAnswer(Completion.IGNORED, self._why_not(found.record), flow_id)
        try:
            plan = self._plan(self._planning_flow(found.record))
        except UnknownFlow as exc:
            return CallbackAnswer(Completion.IGNORED, str(exc), flow_id)
        waiting = found.record.tracks[track].position.kind is TaskKind.WAIT
        if "error" not in completion:
            checked = _completed(completion.get("output", {}), where="the callback's output")
            if isinstance(checked, Failed):
                raise InvalidMessage(checked.error.message)

        def completed(latest: FlowRecord) -> FlowRecord | None:
            at = _track_with(latest, token) if latest.status in ACTIVE else None
            if at is None or (not waiting and latest.tracks[at].early is not None):
                return None
            current = latest.focused(at)
            return _fitting(plan, current, signalled(plan, current, completion))

        if self._write(found, completed) is Ran.STALE:
            latest = self._store.get(key)
            why = self._why_not(latest) if latest else "the flow is gone"
            return CallbackAnswer(Completion.IGNORED, why, flow_id)
        return CallbackAnswer(Completion.COMPLETED if waiting else Completion.KEPT, "", flow_id)

    def _why_not(self, record: FlowRecord) -> str:
        """Why no step awaits a token of ``record`` (for a ForEach lane: of its flow)."""
        if record.is_lane and record.parent is not None:
            parent = self._store.get(record.parent)
            if parent is not None and parent.status in TERMINAL:
                return _not_awaited(parent)
            if record.status is Status.SUCCEEDED:
                return "no step awaits this token: its item is done (completed already)"
        return _not_awaited(record)

    # -- operations ----------------------------------------------------------------------

    def get(self, flow_id: str) -> FlowRecord:
        """The flow by its key (``FlowRecord.key``: for the default tenant's flows, the id),
        or FlowNotFound."""
        record = self._store.get(flow_id)
        if record is None:
            raise FlowNotFound(f"no flow with id {split_key(flow_id)[1]!r}")
        return record

    def find(
        self,
        flow_id: str,
        *,
        tenant: str | None = None,
        visible: Callable[[str], bool] | None = None,
    ) -> FlowRecord:
        """The flow with id ``flow_id``: ``tenant``'s, or whichever tenant's it is, among those
        ``visible`` admits (a caller's scope). FlowNotFound if there is none (or only one the
        caller may not see, which looks the same); AmbiguousFlow if several tenants use the id
        and ``tenant`` does not say which."""
        if tenant is not None:
            found = self._store.get(flow_key(tenant, flow_id))
            candidates = [found] if found is not None else []
        else:
            candidates = self._store.find(flow_id)
        shown = [r for r in candidates if visible is None or visible(r.tenant)]
        if not shown:
            raise FlowNotFound(f"no flow with id {flow_id!r}")
        if len(shown) > 1:
            tenants = ", ".join(sorted(r.tenant for r in shown))
            raise AmbiguousFlow(f"flow id {flow_id!r} names flows of tenants {tenants}: say which")
        return shown[0]

    def lanes(self, flow_id: str) -> list[FlowRecord]:
        """The ForEach lanes of a flow's current run (FlowNotFound if there is no flow)."""
        record = self.get(flow_id)
        found = [self._store.get(lane_id) for lane_id in record.lanes]
        return [lane for lane in found if lane is not None]

    def cancel(
        self, flow_id: str, reason: str = "cancelled by an operator", *, by: str = ""
    ) -> FlowRecord:
        """Cancel an active flow; InvalidTransition if it has already ended. A flow whose type
        is not deployed is cancelled without undoing anything (there are no handlers to undo
        with); its result names the effects left behind. ``by`` (the operator) and ``reason``
        are recorded on the flow's history."""
        return self._operate(flow_id, lambda plan, r: planner.cancel(plan, r, reason, by=by))

    def retry(self, flow_id: str, *, reason: str = "", by: str = "") -> FlowRecord:
        """Run a failed, timed-out or cancelled flow again as a new generation; ``by`` and
        ``reason`` are recorded on the flow's history.

        The ended generation's result event goes out first if it has not yet, so a retry
        never swallows it.
        """
        ended = self.get(flow_id)
        if ended.status in TERMINAL and not ended.result_published:
            self._settle(ended)
        return self._operate(
            flow_id, lambda plan, r: planner.restart(plan, r, reason=reason, by=by)
        )

    def undo(self, flow_id: str, *, reason: str = "", by: str = "") -> FlowRecord:
        """Undo again what a failed, timed-out or cancelled flow left live (its clean-up was
        given up, or an undo failed for good): a new clean-up, with a fresh undo window;
        ``by`` and ``reason`` are recorded on the flow's history."""
        return self._operate(flow_id, lambda plan, r: planner.undo_again(plan, r, reason, by=by))

    def _operate(self, flow_id: str, op: Operation) -> FlowRecord:
        record = self.get(flow_id)
        try:
            definition: Flow | None = self._definition(record)[0]
        except UnknownFlow:
            definition = None
        plan = self._plan(definition)
        errors: list[InvalidTransition] = []

        def change(current: FlowRecord) -> FlowRecord | None:
            try:
                updated: FlowRecord = op(plan, current)
            except InvalidTransition as exc:
                errors.append(exc)
                return None
            except UnknownFlow:
                errors.append(InvalidTransition(f"no deployed version runs {current.flow!r} flows"))
                return None
            return updated

        committed = self._store.change(flow_id, change)
        if errors:
            raise errors[-1]
        if committed is None:
            raise FlowNotFound(f"no flow with id {flow_id!r}")
        self._settle(committed)
        return committed

    def sweep(self, *, grace_s: float, limit: int = 100) -> SweepReport:
        """Settle what a crash or an outage left behind (invariant 5): active flows whose next
        task is overdue and gone get a fresh one; ended flows whose result event never went
        out publish it. What cannot be settled is ended (a type no longer deployed, a task
        lost too often, a document that no longer parses) or set aside for a while, so the
        sweep always reaches the flows behind it (invariant 11).
        """
        cutoff = self._clock.now() - timedelta(seconds=grace_s)
        report = SweepReport()
        overdue = self._store.overdue(cutoff=cutoff, limit=limit)
        self._metrics.sweep_found(overdue, now=self._clock.now())
        for found in overdue:
            report.overdue += 1
            if isinstance(found, Unreadable):
                self._fail_unreadable(found, report)
            else:
                self._guarded(found, report, self._recover)
        for record in self._store.unpublished(cutoff=cutoff, limit=limit):
            report.unpublished += 1
            self._guarded(record, report, self._republish)
        # Waiting flows a lost hand-over left waiting: admit what there is room for.
        waiting_tenants = {r.tenant for r in self._store.waiting(limit=limit)}
        for tenant in sorted(waiting_tenants):
            report.admitted += self._admit(tenant)
        limited = {t for t, p in self._admission.tenants.tenants.items() if p.limited}
        self._metrics.tenants_waiting(
            {t: self._store.count_waiting(t) for t in sorted(waiting_tenants | limited)}
        )
        log.info("sweep", extra={"report": report.__dict__})
        return report

    def _guarded(
        self,
        record: FlowRecord,
        report: SweepReport,
        act: Callable[[FlowRecord, SweepReport], None],
    ) -> None:
        try:
            act(record, report)
        except Exception:  # one bad flow must not starve the others
            report.errors += 1
            log.exception("sweep could not settle a flow", extra={"flow_id": record.flow_id})
            self._set_aside(record)

    def _set_aside(self, record: FlowRecord) -> None:
        """Move a flow the sweep cannot settle out of the head of the overdue query for a
        while (best effort)."""
        until = self._clock.now() + timedelta(seconds=self._limits.sweep_backoff_s)
        seen = record.tracks
        try:
            self._store.change(
                record.key,
                lambda current: (
                    planner.set_aside(current, until) if current.tracks == seen else None
                ),
            )
        except Exception:
            log.warning("could not set a flow aside", extra={"flow_id": record.flow_id})

    def _recover(self, record: FlowRecord, report: SweepReport) -> None:
        if not record.tracks:
            return
        try:
            flow = self._planning_flow(record)
        except UnknownFlow:
            self._recover_unknown_type(record, report)
            return
        lost = [k for k, t in record.tracks.items() if t.next and not self._queue.exists(t.next)]
        if not lost:
            report.still_queued += 1  # late (a backlog or a paused queue), not lost
            self._set_aside(record)
            return
        for key in lost:
            report.rescued += self._rescue(record, flow, key)

    def _recover_unknown_type(self, record: FlowRecord, report: SweepReport) -> None:
        due = record.next_run_at or record.updated_at
        if (self._clock.now() - due).total_seconds() < self._limits.unknown_flow_grace_s:
            self._set_aside(record)  # a rolling deploy may bring the type back
            return
        plan = self._plan(None)
        seen = record.tracks
        message = f"no deployed version runs {record.flow!r} flows"
        committed = self._store.change(
            record.key,
            lambda current: (
                planner.unknown_flow(plan, current, message=message)
                if (current.status in ACTIVE or current.cleaning) and current.tracks == seen
                else None
            ),
        )
        if committed is not None:
            report.ended += 1
            self._settle(committed)

    def _fail_unreadable(self, found: Unreadable, report: SweepReport) -> None:
        try:
            self._store.fail_unreadable(found.flow_id, reason=found.reason, now=self._clock.now())
            report.ended += 1
        except Exception:
            report.errors += 1
            log.exception("could not end an unreadable flow", extra={"flow_id": found.flow_id})

    def _republish(self, record: FlowRecord, report: SweepReport) -> None:
        self._settle(record)
        report.republished += 1

    def _rescue(self, record: FlowRecord, flow: Flow, key: str) -> int:
        stuck = record.tracks[key].next
        plan = self._plan(flow)
        limit = self._limits.max_rescues

        def rescued(latest: FlowRecord) -> FlowRecord | None:
            track = latest.tracks.get(key)
            moving = latest.status in ACTIVE or latest.cleaning
            if not moving or track is None or track.next != stuck:
                return None
            current = latest.focused(key)
            if current.position.rescue >= limit:
                return planner.lost(plan, current, rescues=limit)
            return planner.rescue(plan, current)

        committed = self._store.change(record.key, rescued)
        if committed is None:
            return 0
        self._settle(committed)
        log.warning("rescued a lost task", extra={"flow_id": record.flow_id})
        self._metrics.sweeper_rescued(record.flow)
        return 1

    def _planning_flow(self, record: FlowRecord) -> Flow:
        """What plans ``record``: its flow's definition, or a lane's item steps."""
        flow = self._definition(record)[0]
        if record.is_lane and record.scope is not None:
            return foreach.item_flow(flow, record.scope)
        return flow

    def _definition(self, record: FlowRecord) -> tuple[Flow, str]:
        """The definition to plan ``record`` with, and why it is not the flow's own version
        ('' when it is). A version that is no longer registered is planned (compensated) with
        the newest one; UnknownFlow if no version of the flow is registered."""
        try:
            return self._registry.get(record.flow, record.version), ""
        except UnknownVersion as gone:
            return self._registry.get(record.flow), str(gone)

    def _plan(self, flow: Flow | None) -> Plan:
        return Plan(
            nonce=secrets.token_hex(16),
            definition=flow,
            queues=self._queues,
            now=self._clock.now(),
            kinds=REGISTRY,
            history_limit=self._limits.history_limit,
            retention_s=self._limits.retention_s,
            p95_s=self._breakers.p95_s if self._breakers is not None else None,
            undo_window_s=self._limits.undo_window_s,
            undo_initial_s=self._limits.undo_initial_s,
            undo_max_interval_s=self._limits.undo_max_interval_s,
        )


def _plan_of(engine: Engine, record: FlowRecord) -> Plan:
    return engine._plan(engine._planning_flow(record))


def _tenant_of(named: str | None, bound: str) -> str:
    """The tenant of a start message that came by ``bound``'s topic; InvalidMessage if the
    message names another (a publisher may start flows of its own tenant only)."""
    if named is None or named == bound:
        return bound
    came_by = (
        "flow-requests, which starts the default tenant's flows only"
        if bound == DEFAULT_TENANT
        else f"tenant {bound!r}'s own topic"
    )
    raise InvalidMessage(
        f"the message names tenant {named!r} but came by {came_by}: a tenant's flows start on "
        f"its own topic (flow-requests.{named}), which only its publishers may publish on"
    )


def _capped(asked: str | None, allowed: str) -> str:
    """A message's priority, never above its tenant's: it may ask for ``low``, not ``high``."""
    return "low" if asked == "low" or allowed == "low" else allowed


def _token_of(track: Track | None, effect: Effect | None, position: Position) -> str:
    """The callback token a handler is told: its step's, or for an undo, the one its run sent
    (so a replay of the run under its key sends the same request)."""
    if position.kind is TaskKind.COMPENSATE:
        return (effect.token if effect is not None else None) or ""
    return (track.token if track is not None else None) or ""


def _track_with(record: FlowRecord, token: str) -> str | None:
    """The track awaiting ``token``: compared in constant time, so how long a wrong guess
    takes says nothing of how much of it was right."""
    given = token.encode("utf-8", "surrogatepass")
    found = None
    for key, track in record.tracks.items():
        if track.token is not None and hmac.compare_digest(track.token.encode("utf-8"), given):
            found = key
    return found


def _not_awaited(record: FlowRecord) -> str:
    """Why no step of ``record`` awaits a token that names it."""
    if record.status in TERMINAL:
        late = record.result is not None and record.result.code == "CALLBACK_TIMEOUT"
        return (
            f"the flow has ended ({record.status}){': the callback came too late' if late else ''}"
        )
    if record.status is Status.COMPENSATING:
        return "the flow is being undone; it awaits no callback"
    return "no step awaits this token: it was completed already, or belongs to an earlier run"


def _fanned(
    latest: FlowRecord, position: Position, plan: Plan, items: list[Any]
) -> FlowRecord | None:
    current = _focused_at(latest, position)
    if current is None or current.tracks[position.step].fanout is not None:
        return None
    return fanned_out(plan, current, items)


def _started(latest: FlowRecord, position: Position) -> FlowRecord | None:
    current = _focused_at(latest, position)
    if current is None or current.next is None:
        return None
    return lanes_started(current)


def _applied(
    latest: FlowRecord, position: Position, plan: Plan, effects: list[Effect]
) -> FlowRecord | None:
    current = _focused_at(latest, position)
    return None if current is None else gathered(plan, current, effects)


# The engine's own tasks of a ForEach: list and start, join, gather.
_FOREACH = frozenset({TaskKind.FANOUT, TaskKind.JOIN, TaskKind.GATHER})
# Tasks that only read (a poll, a choice, a callback's wait): they claim nothing.
_UNCLAIMED = frozenset({TaskKind.POLL, TaskKind.CHOICE, TaskKind.WAIT})


def _track_of(record: FlowRecord, position: Position) -> str | None:
    """The key of the active flow's track at ``position`` (None: a stale or duplicate task),
    or of an ended flow's clean-up."""
    if record.status in ACTIVE:
        return record.track_at(position)
    return record.track_at(position) if record.cleaning else None


# A step due at once after the one a request ran is run in that request while the request
# has used less than this share of its time budget.
CONTINUE_WITHIN = 0.25
_CONTINUED = frozenset({TaskKind.ACTION, TaskKind.COMPENSATE})


@dataclass(frozen=True)
class _Request:
    """The task request being served: when it began and the budget of its queue."""

    began: datetime
    budget_s: float


_REQUEST: contextvars.ContextVar[_Request | None] = contextvars.ContextVar(
    "relayflow_request", default=None
)


@dataclass(frozen=True)
class _Onward:
    """A step to run in this request after the commit: claimed for ``holder``, or (holder
    None) put off as its breaker's ``verdict`` says, in the same commit."""

    holder: str | None
    verdict: Verdict | None
    budget_s: float

    def apply(self, plan: Plan, planned: FlowRecord, *, lease_s: float) -> FlowRecord:
        if not _runs_now(planned, plan.now):
            return planned
        if self.holder is None:
            assert self.verdict is not None and self.verdict.until is not None
            return planner.defer(plan, planned, until=self.verdict.until, why=self.verdict.detail)
        claimed = planner.claim(plan, planned, lease_s=lease_s, holder=self.holder)
        return planned if planner.exhausted(plan, claimed) else claimed


def _runs_now(record: FlowRecord, now: datetime) -> bool:
    """Whether ``record``, one admitted track, is at a claimed step whose task is due now."""
    nxt = record.next
    return (
        record.status in ACTIVE
        and not record.is_lane
        and len(record.tracks) == 1
        and record.admission == "admitted"
        and record.position.kind in _CONTINUED
        and nxt is not None
        and nxt.position == record.position
        and nxt.run_at <= now
    )


def _marked(record: FlowRecord) -> FlowRecord:
    """A flow's result event marked sent in the commit that ends it, when a task's delivery
    makes that commit: the delivery publishes the event before it answers, and if it cannot
    it unmarks the result (the sweeper then sends it) or, if it dies first, Cloud Tasks
    delivers the task again and that delivery sends it (``_ended_by``). One write fewer per
    flow than committing, publishing, then marking."""
    if record.status not in TERMINAL or record.result is None or record.is_lane:
        return record
    if record.result_published:
        return record
    return record.model_copy(update={"result_published": True})


def _ended_by(record: FlowRecord, position: Position) -> bool:
    """Whether ``record`` ended at ``position`` with a result its commit marked sent."""
    return (
        record.status in TERMINAL
        and record.result is not None
        and record.result_published
        and not record.is_lane
        and (
            record.position == position
            or (record.cleanup is not None and record.cleanup.from_position == position)
        )
    )


def _focused_at(record: FlowRecord, position: Position) -> FlowRecord | None:
    """``record`` focused on its track at ``position``, or None if no track is there."""
    key = _track_of(record, position)
    return None if key is None else record.focused(key)


def _definition_mismatch(flow: Flow, position: Position) -> str:
    """Why ``position`` no longer fits ``flow`` (its definition changed mid-flight), or ''."""
    if position.scope is not None:  # an item's step, undone by the flow
        scope = flow.named(position.scope) if position.scope in flow.graph.order else None
        if not isinstance(scope, ForEach):
            return f"flow {flow.name!r} has no ForEach {position.scope!r} any more"
        flow = scope.item_flow
    if position.step_index >= len(flow.steps):
        return f"flow {flow.name!r} has no step {position.step_index} any more"
    step = flow.step(position.step_index)
    if step.name != position.step:
        return f"step {position.step_index} of {flow.name!r} is now {step.name!r}"
    if (position.kind is TaskKind.POLL) != isinstance(step, PollStep):
        return f"step {step.name!r} of {flow.name!r} changed kind"
    if (position.kind is TaskKind.CHOICE) != isinstance(step, IfStep):
        return f"step {step.name!r} of {flow.name!r} changed kind"
    if position.kind is TaskKind.WAIT and not isinstance(step, CallbackStep):
        return f"step {step.name!r} of {flow.name!r} changed kind"
    if (position.kind in _FOREACH) != isinstance(step, ForEach):
        return f"step {step.name!r} of {flow.name!r} changed kind"
    if position.kind is TaskKind.COMPENSATE and not getattr(step, "compensate", None):
        return f"step {step.name!r} of {flow.name!r} no longer has a compensation"
    return ""


def _fitting(plan: Plan, current: FlowRecord, planned: FlowRecord) -> FlowRecord:
    """``planned``, or the flow aborted if its document would exceed what Firestore stores."""
    size = len(planned.model_dump_json().encode("utf-8"))
    if size <= MAX_DOC_BYTES:
        return planned
    message = f"the flow document would be {size} bytes; Firestore stores at most 1 MiB"
    return planner.abort(plan, current, code="DOCUMENT_TOO_LARGE", message=message)


def _span_attributes(record: FlowRecord) -> dict[str, str | int]:
    pos = record.position
    return {
        "flow_id": record.flow_id,
        "flow": record.flow,
        "step": pos.step,
        "kind": pos.kind.value,
        "attempt": pos.attempt,
        "poll": pos.poll,
        "generation": pos.generation,
    }


def _outcome_name(outcome: Outcome) -> str:
    """How a handler ended: completed, waiting, retry or failed."""
    return type(outcome).__name__.lower()


def _trace_outcome(span: Span, outcome: Outcome) -> None:
    """Name how the handler ended on its span (completed, waiting, retry, failed)."""
    span.set_attribute("outcome", _outcome_name(outcome))
    if isinstance(outcome, Retry | Failed):
        telemetry.mark_error(span, outcome.error.message)


def _dependencies_of(registry: Registry) -> set[str]:
    """Every dependency a step of a registered flow names (a ForEach's steps too)."""
    names: set[str] = set()
    for flow in registry:
        for step in flow.steps:
            inner = step.steps if isinstance(step, ForEach) else (step,)
            names |= {d for s in inner if (d := getattr(s, "dependency", None))}
    return names


def _next_try_s(step: Step, position: Position, key: str) -> float:
    """How long the step would wait before its next try anyway: its poll curve, or its retry
    curve (what a put-off step waits at least, so it calls no more often than it would).
    Each time it was put off counts as a try on the curve: with no breaker, each of those
    would have been a call that failed, and the curve would have moved on."""
    if isinstance(step, PollStep):
        return step.policy.delay_s(n=position.poll + position.deferral, key=key)
    if isinstance(step, ActionStep):
        tried = max(0, position.attempt - 1 + position.deferral)
        delay: float = step.retry.delay_s(retry=tried, key=key)
        return delay
    return 0.0


def _handler_for(step: Step, kind: TaskKind) -> Handler:
    assert not isinstance(step, ForEach), "a ForEach's tasks are the engine's own"
    if isinstance(step, PollStep):
        return step.check
    if isinstance(step, IfStep):
        return functools.partial(_choose, step)
    if kind is TaskKind.COMPENSATE:
        assert step.compensate is not None
        return step.compensate
    if kind is TaskKind.WAIT:
        assert isinstance(step, CallbackStep)
        return step.check or _no_callback_yet
    return step.run


def _no_callback_yet(ctx: StepContext) -> None:
    """A callback step without a safety net, at its timeout: still waiting means timed out."""
    raise NotReady("no callback yet")


def _choose(step: IfStep, ctx: StepContext) -> dict[str, Any]:
    """A choice's output: which branch its condition picked."""
    picked = step.condition(ctx)
    if not isinstance(picked, bool):
        raise PermanentError(
            f"the condition of {step.name!r} returned a {type(picked).__name__}, not a bool",
            code="INVALID_OUTPUT",
        )
    return {"branch": "then" if picked else "otherwise"}


def _call(handler: Handler, context: StepContext, *, extra: dict[str, str]) -> Outcome:
    """Run a handler and classify how it ended (invariant 7)."""
    try:
        output = handler(context)
    except NotReady as signal:
        log.info("not ready", extra={**extra, "detail": signal.detail})
        return Waiting(signal)
    except RetryableError as exc:
        log.warning("retryable error", extra={**extra, "error": exc.message})
        return Retry(exc)
    except PermanentError as exc:
        log.warning("permanent error", extra={**extra, "error": exc.message})
        return Failed(exc)
    except Exception as exc:  # a bug or an unclassified library error: retry, but bounded
        log.exception("handler raised an unexpected error", extra=extra)
        return Retry(RetryableError(f"{type(exc).__name__}: {exc}", code="UNEXPECTED"))
    return _completed(output, where=f"output of {context.step}")


def _completed(output: object, *, where: str) -> Outcome:
    """A handler's output, if the flow document can hold it; a permanent failure otherwise."""
    if output is None:
        return Completed({})
    if not isinstance(output, dict):
        message = f"{where} is a {type(output).__name__}; a handler returns a dict or None"
        return Failed(PermanentError(message, code="INVALID_OUTPUT"))
    try:
        check_storable(output, where=where, max_bytes=MAX_OUTPUT_BYTES)
    except UnstorableValue as exc:
        return Failed(PermanentError(str(exc), code="INVALID_OUTPUT"))
    return Completed(output)


def safe_id(message_id: str) -> str:
    """A document id for a Pub/Sub message id: itself when it is a legal flow id, else hashed."""
    if re.fullmatch(FLOW_ID_PATTERN[1:-1], message_id) and is_document_id(message_id):
        return message_id
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in message_id)[:60]
    return f"{safe}-{hashlib.sha256(message_id.encode()).hexdigest()[:12]}"


__all__ = [
    "CallbackAnswer",
    "Completion",
    "Engine",
    "Limits",
    "Ran",
    "StartResult",
    "Started",
    "SweepReport",
    "idempotency_key",
    "safe_id",
]

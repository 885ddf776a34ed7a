"""The engine: start flows, run the task at a flow's position, sweep, cancel, retry, reset.

Every entry point (the start function, the worker, the poller, the api) is a thin shell around
one ``Engine`` method. The engine reads the flow, runs a handler outside any transaction, asks
the planner what comes next, commits that with a compare-and-set that re-checks the position,
and only then enqueues the next task and publishes the result (DESIGN invariants 4 and 5).

``Engine`` is the face; each concern is a module of this package (see docs/architecture.md):
``kernel`` (ports, plans, read, write, settle), ``tasks`` (a delivery routed), ``delivery``
(claim, run, commit, continue inline), ``execution`` (handler calls and their middleware),
``protection`` (breakers, put-off, bring-forward), ``lanes`` (ForEach), ``intake`` (start
messages), ``sweeper``, ``chains`` (poll chains as their queue holds them), ``operations``,
``callbacks``, ``tenancy``, ``endings``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry.trace import Tracer

from relayflow.core import scrubbing
from relayflow.core.admission import Admission
from relayflow.core.breakers import Breakers, Verdict
from relayflow.core.clock import Clock
from relayflow.core.engine import chains
from relayflow.core.engine.callbacks import Callbacks
from relayflow.core.engine.children import Children
from relayflow.core.engine.delivery import Delivery
from relayflow.core.engine.endings import Endings
from relayflow.core.engine.execution import MAX_OUTPUT_BYTES, Execution
from relayflow.core.engine.focus import MAX_DOC_BYTES
from relayflow.core.engine.intake import Intake
from relayflow.core.engine.kernel import Kernel, Limits
from relayflow.core.engine.keys import idempotency_key, safe_id
from relayflow.core.engine.lanes import Lanes
from relayflow.core.engine.operations import Operations
from relayflow.core.engine.outcomes import (
    CallbackAnswer,
    Completion,
    Ran,
    Started,
    StartResult,
    SweepReport,
)
from relayflow.core.engine.protection import Protection
from relayflow.core.engine.signals import SignalAnswer, Signalled, Signals, checked_signal
from relayflow.core.engine.sweeper import Sweeper
from relayflow.core.engine.tasks import Tasks
from relayflow.core.engine.tenancy import Resumed, Tenancy
from relayflow.core.errors import FlowNotFound, InvalidMessage
from relayflow.core.flows import Registry
from relayflow.core.metrics import Metrics
from relayflow.core.payloads import Offload, Sizes
from relayflow.core.planner import BulkMark, Preview, QueueNames
from relayflow.core.ports import Events, Queue, Store, TenantState
from relayflow.core.position import TaskPayload
from relayflow.core.records import FlowRecord, HistoryEntry, PendingSignal
from relayflow.core.sealing import Sealing
from relayflow.core.tenants import DEFAULT_TENANT, Tenants

log = logging.getLogger("relayflow.core.engine")


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
        offload: Offload | None = None,
        sealing: Sealing | None = None,
    ) -> None:
        """``offload``: where values too large for a flow document go (None: none do, and
        the inline limits hold: ``core.payloads``). ``sealing``: the flows' sensitive values,
        sealed with its key as they enter a flow (before offload: ``Kernel.codec``), opened
        for its handlers (None: no key; a flow that marks fields cannot store them)."""
        kernel = Kernel(
            registry=registry,
            store=store,
            queue=queue,
            events=events,
            clock=clock,
            queues=queues or QueueNames(),
            limits=limits or Limits(),
            admission=Admission(store, tenants or Tenants()),
            breakers=breakers,
            tracer=tracer,
            metrics=metrics or Metrics(),  # the base class records nothing
            offload=offload,
            sealing=sealing,
        )
        protection = Protection(kernel)
        execution = Execution.standard(kernel, breaker=protection.outcome)
        delivery = Delivery(kernel, execution, protection)
        endings = Endings(kernel)
        lanes = Lanes(kernel, delivery, execution, endings)
        self._kernel = kernel
        self._intake = Intake(kernel)
        children = Children(kernel, execution)
        self._tasks = Tasks(kernel, delivery, lanes, protection, endings, children)
        self._protection = protection
        self._callbacks = Callbacks(kernel)
        self._signals = Signals(kernel)
        self._sweeper = Sweeper(kernel)
        self._operations = Operations(kernel)
        self._tenancy = Tenancy(kernel)

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
        tenant's policy. A malformed message is recorded in ``rejected`` and reported, never
        raised; infrastructure errors raise, so that Pub/Sub redelivers.
        """
        with scrubbing.revealing():
            return self._intake.start(
                data, message_id=message_id, attributes=attributes, tenant=tenant
            )

    def run_task(
        self, payload: TaskPayload, *, redelivery: bool = False, answered: bool = False
    ) -> Ran:
        """Run the task at ``payload.position`` if it is the flow's current position.

        ``redelivery``: Cloud Tasks says this delivery retries one that failed (its
        X-CloudTasks-TaskRetryCount is above 0), not a first delivery or a duplicate of one.
        ``answered``: the attempt it retries got an answer that says it is over
        (X-CloudTasks-TaskPreviousResponse, not a timeout), so nothing still runs it.
        """
        with scrubbing.revealing():  # what its handlers are told is kept out of its text
            return self._tasks.run(payload, redelivery=redelivery, answered=answered)

    def reject_task(self, task_name: str, reason: str, body: bytes) -> None:
        """Record a task that can never be run (its body does not parse, or names an id
        Firestore reserves) in ``rejected`` with ``reason``; the caller answers it 2xx so Cloud
        Tasks does not retry it."""
        self._intake.reject_task(task_name, reason, body)

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
        return self._callbacks.complete(token, completion, visible=visible)

    def signal(
        self,
        flow_id: str,
        name: str,
        data: dict[str, Any] | None = None,
        *,
        signal_id: str | None = None,
        by: str,
        reason: str = "",
        item: int | None = None,
        tenant: str | None = None,
        visible: Callable[[str], bool] | None = None,
    ) -> SignalAnswer:
        """Send signal ``name`` with ``data`` to flow ``flow_id`` (``tenant``'s, or whichever
        tenant's it is among those ``visible`` admits), for its WaitForSignal steps; ``item``:
        the ForEach item it is for, when the step that waits is an item's.

        Delivered if a step waits for it, kept if none does yet; a ``signal_id`` taken already
        is a duplicate; an ended or unknown flow, or a name no step of the flow waits for, is
        ignored, and the answer says why. ``by`` (who sent it) and ``reason`` go in the flow's
        history. InvalidMessage (SignalTooLarge) if the signal itself is not one to keep:
        a bad name or id, data that is not a JSON object Firestore stores, or too large.
        """
        name, data, signal_id, reason = checked_signal(
            name, {} if data is None else data, signal_id=signal_id, reason=reason
        )
        if item is not None and (isinstance(item, bool) or not isinstance(item, int) or item < 0):
            raise InvalidMessage(f"a signal's item is an item index >= 0, got {item!r}")
        signal = PendingSignal(
            name=name,
            data=data,
            signal_id=signal_id,
            by=by[:200],
            reason=reason,
            at=self._kernel.clock.now(),
            item=item,
        )
        try:
            record: FlowRecord | None = self.find(flow_id, tenant=tenant, visible=visible)
        except FlowNotFound:
            record = None
        return self._signals.send(record, flow_id, signal)

    def reject_message(
        self, data: bytes, message_id: str, attributes: dict[str, str], reason: str
    ) -> None:
        """Record a ``flow-signals`` message nothing will take in ``rejected``, with why (the
        caller acks it, so Pub/Sub does not deliver it again)."""
        self._intake.reject_message(data, message_id, attributes, reason)

    def sweep(self, *, grace_s: float, limit: int = 100) -> SweepReport:
        """Settle what a crash or an outage left behind (invariant 5; see ``sweeper``)."""
        return self._sweeper.sweep(grace_s=grace_s, limit=limit)

    def get(self, flow_id: str) -> FlowRecord:
        """The flow by its key (``FlowRecord.key``: for the default tenant's flows, the id),
        or FlowNotFound."""
        return self._operations.get(flow_id)

    @property
    def sizes(self) -> Sizes:
        """How large a flow's input, a step's output and a child's input may be."""
        return self._kernel.sizes

    def loaded(self, stored: Any, record: FlowRecord) -> Any:
        """One of ``record``'s stored values (its input, an output, its result's data) as
        a reader other than its handlers is given it (the api, the harness): offloaded
        payloads read back (PayloadMissing, PayloadCorrupt, PayloadUnavailable), sensitive
        fields still sealed (``Kernel.resolved``)."""
        return self._kernel.resolved(stored, record)

    def opened(self, stored: Any, record: FlowRecord, *path: str) -> Any:
        """``record``'s value at ``path`` (``"input"``; ``"outputs", step``) as its handlers
        see it: offloaded payloads read back, sealed fields opened (``Kernel.loaded``)."""
        return self._kernel.loaded(stored, record, *path)

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
        return self._operations.find(flow_id, tenant=tenant, visible=visible)

    def polls_in_flight(self, record: FlowRecord) -> tuple[HistoryEntry, ...]:
        """The polls ``record``'s poll chains ran since its document was last written (read
        from the chain's newest task), oldest first: what a reader of the flow sees of them
        before the chain's next checkpoint writes them to its history; none when the queue
        cannot be read now: they are a reader's extra, and the flow is shown without them."""
        try:
            return chains.in_flight(self._kernel.queue, record, self._kernel.limits.poll_chain)
        except Exception:
            log.warning("could not read a poll chain's task", exc_info=True)
            return ()

    def lanes(self, flow_id: str) -> list[FlowRecord]:
        """The ForEach lanes of a flow's current run (FlowNotFound if there is no flow)."""
        return self._operations.lanes(flow_id)

    def cancel(
        self,
        flow_id: str,
        reason: str = "cancelled by an operator",
        *,
        by: str = "",
        bulk: BulkMark | None = None,
    ) -> FlowRecord:
        """Cancel an active flow; InvalidTransition if it has already ended. A flow whose type
        is not deployed is cancelled without undoing anything (there are no handlers to undo
        with); its result names the effects left behind. ``by`` (the operator) and ``reason``
        are recorded on the flow's history, and ``bulk``'s id when a bulk action does it (once:
        AlreadyActed if it did already, ChangedSince if the flow moved on since its dry run)."""
        return self._operations.cancel(flow_id, reason, by=by, bulk=bulk)

    def retry(
        self,
        flow_id: str,
        *,
        reason: str = "",
        by: str = "",
        bulk: BulkMark | None = None,
        start_in_s: float = 0.0,
    ) -> FlowRecord:
        """Run a failed, timed-out or cancelled flow again as a new generation; ``by`` and
        ``reason`` are recorded on the flow's history (and ``bulk``'s id, as for ``cancel``);
        its first steps are due ``start_in_s`` from now (a bulk action's pacing).

        The ended generation's result event goes out first if it has not yet, so a retry
        never swallows it.
        """
        return self._operations.retry(
            flow_id, reason=reason, by=by, bulk=bulk, start_in_s=start_in_s
        )

    def preview(
        self, record: FlowRecord, action: str, *, step: str | None = None, undo: bool = True
    ) -> Preview:
        """What ``action`` (``retry``, ``cancel``, or ``reset`` to ``step``) would do to
        ``record`` now, said before it is done: the steps that would run again, the effects
        undone and kept, and what those steps call (a dry run's row, built from the same
        planner functions as the operation)."""
        return self._operations.preview(record, action, step=step, undo=undo)

    def reset(
        self,
        flow_id: str,
        step: str,
        *,
        undo: bool = True,
        reason: str = "",
        by: str = "",
        bulk: BulkMark | None = None,
    ) -> FlowRecord:
        """Run an ended flow again from ``step`` as a new generation (``planner.reset``): with
        ``undo``, the live effects of ``step`` and of every step after it are undone first,
        newest first; without, they are kept and replayed under the same idempotency keys.
        The steps before it keep their outputs and effects. ``by`` and ``reason`` are
        recorded on the flow's history and its ``reset`` (and ``bulk``'s id, as for
        ``cancel``); InvalidTransition says why a flow cannot be reset (active, cleaning up, a
        child, ``step`` not one of its own...).

        The ended generation's result event goes out first if it has not yet.
        """
        return self._operations.reset(flow_id, step, undo=undo, reason=reason, by=by, bulk=bulk)

    def preview_reset(self, flow_id: str, step: str, *, undo: bool = True) -> Preview:
        """What ``reset`` would do now, changing nothing: the steps that would run again, the
        effects that would be undone (newest first) and those kept; ``allowed`` False and
        ``reason`` why when ``reset`` would refuse."""
        return self._operations.preview_reset(flow_id, step, undo=undo)

    def undo(self, flow_id: str, *, reason: str = "", by: str = "") -> FlowRecord:
        """Undo again what a failed, timed-out or cancelled flow left live (its clean-up was
        given up, or an undo failed for good): a new clean-up, with a fresh undo window;
        ``by`` and ``reason`` are recorded on the flow's history."""
        return self._operations.undo(flow_id, reason=reason, by=by)

    def pause_tenant(self, tenant: str, *, by: str = "", reason: str = "") -> TenantState:
        """Stop dispatching ``tenant``'s flows (their tasks are put off) and admitting new ones."""
        return self._tenancy.pause(tenant, by=by, reason=reason)

    def resume_tenant(self, tenant: str, *, by: str = "", reason: str = "") -> Resumed:
        """Let ``tenant``'s flows go on where they were, at once (what the pause put off is
        brought forward), and admit its waiting ones."""
        return self._tenancy.resume(tenant, by=by, reason=reason)

    def breaker_views(self) -> list[dict[str, Any]]:
        """Every dependency's breaker: state, window counts, budget, p95, transitions."""
        return self._protection.views()

    def ready(self, dependencies: Iterable[str]) -> Verdict | None:
        """The first of ``dependencies`` whose breaker would put a call off now (open,
        half-open, or its retry budget spent), asking only; None if each would take one. What
        a bulk action asks before a batch of flows that call them."""
        return self._protection.ready(dependencies)

    def tenant_views(self) -> list[dict[str, Any]]:
        """Every tenant with a policy or a state: its limits, paused or not, flows waiting."""
        return self._tenancy.views()

    def tenant_view(self, tenant: str) -> dict[str, Any] | None:
        """One tenant's limits, state and flows, as ``tenant_views`` shows it; None for a
        tenant with neither a policy nor an operator's state (not the default one)."""
        return self._tenancy.view(tenant)


__all__ = [
    "MAX_DOC_BYTES",
    "MAX_OUTPUT_BYTES",
    "CallbackAnswer",
    "Completion",
    "Engine",
    "Limits",
    "Ran",
    "SignalAnswer",
    "Signalled",
    "StartResult",
    "Started",
    "SweepReport",
    "idempotency_key",
    "safe_id",
]

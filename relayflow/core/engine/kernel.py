"""What every part of the engine shares: its ports, clock and limits, and the few things every
part does the same way — make a plan, read a flow, write a change, settle what follows it.

Settling is what makes the engine safe to kill at any point (DESIGN invariant 5): after every
commit, and again whenever anyone looks at a flow later (a duplicate task, the sweeper, an
operator), the flow's next task is made to exist and an ended flow's result event is sent. Both
are idempotent, so settling twice is harmless and settling never is what the sweeper catches.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from opentelemetry.trace import Tracer

from relayflow.core import foreach, payloads, planner, tracing
from relayflow.core.admission import Admission
from relayflow.core.breakers import Breakers
from relayflow.core.clock import Clock
from relayflow.core.codec import Chain, Slot
from relayflow.core.engine.focus import focused_at
from relayflow.core.engine.outcomes import Ran
from relayflow.core.engine.results import Results
from relayflow.core.errors import (
    PayloadUnavailable,
    PermanentError,
    RetryableError,
    UnknownFlow,
    UnknownVersion,
)
from relayflow.core.flows import Flow, Registry
from relayflow.core.kinds import REGISTRY
from relayflow.core.kinds.child import wakes
from relayflow.core.metrics import Metrics
from relayflow.core.payloads import Offload, Sizes
from relayflow.core.planner import Completed, Failed, Outcome, Plan, QueueNames, Retry
from relayflow.core.ports import (
    Change,
    Events,
    Queue,
    Snapshot,
    Store,
    UnreadableFlow,
    UnstorableChange,
)
from relayflow.core.position import MAX_POLL_CHAIN, POLL_CHAIN, TaskKind
from relayflow.core.records import FlowRecord
from relayflow.core.sealing import Sealed, Sealing
from relayflow.core.state import ACTIVE, TERMINAL
from relayflow.core.values import UnstorableValue, check_storable

log = logging.getLogger("relayflow.core.engine")
Then = Callable[[Snapshot], Ran | None]  # what runs after a commit instead of settling it


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
    # A flow's first steps are claimed by its create for their tasks' first dispatch
    # (``planner.first_claims``), for a lease that lets a first delivery this late still run
    # under a whole ``claim_lease_s``; a later one claims for itself. Its redelivery waits out
    # at most the two (as it waits out a delivery's own claim today).
    first_delivery_within_s: float = 30.0
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
    # ``engine.delivery``); off, every step is delivered as its own task.
    continue_inline: bool = False
    # An undo that cannot be done now (its dependency down) goes on after the flow has
    # ended, as its clean-up, on a long backoff, for this long (0: recorded as failed).
    undo_window_s: float = 24 * 3600.0
    undo_initial_s: float = 30.0
    undo_max_interval_s: float = 3600.0
    # How many polls a poll chain runs between two writes of its flow's document.
    poll_chain: int = POLL_CHAIN

    def __post_init__(self) -> None:
        if not 1 <= self.poll_chain <= MAX_POLL_CHAIN:
            raise ValueError(
                f"poll_chain must be 1..{MAX_POLL_CHAIN} polls between two writes "
                f"(1: every poll writes), not {self.poll_chain}"
            )


class Kernel:
    """The engine's shared ports and its plan, read, write and settle."""

    def __init__(
        self,
        *,
        registry: Registry,
        store: Store,
        queue: Queue,
        events: Events,
        clock: Clock,
        queues: QueueNames,
        limits: Limits,
        admission: Admission,
        breakers: Breakers | None,
        tracer: Tracer | None,
        metrics: Metrics,
        offload: Offload | None = None,
        sealing: Sealing | None = None,
    ) -> None:
        self.registry = registry
        # The flows' sensitive values: sealed as they enter a flow, opened for its handlers.
        self.sealing = sealing or Sealing(registry)
        self.store = store
        self.queue = queue
        self.clock = clock
        self.queues = queues
        self.limits = limits
        self.admission = admission
        # Dependencies' breakers and retry budgets (None: steps call what they call, unguarded).
        self.breakers = breakers
        self.tracer = tracer  # None: tracing is off
        self.metrics = metrics
        self.kinds = REGISTRY
        # The seam every stored value passes (``core.codec``): sealing first, offloading
        # last, so the bucket holds sensitive values sealed (seal, then offload).
        self.offload = offload
        self.sealed = Sealed(self.sealing)
        offloading = [offload] if offload is not None else []
        self.codec = Chain([self.sealed, *offloading])
        # What a reader other than the flow's handlers is given (``resolved``).
        self.resolving = Chain(offloading)
        self.sizes: Sizes = offload.sizes if offload is not None else payloads.INLINE
        self.results = Results(
            store=store, events=events, tenants=admission.tenants, metrics=metrics, tracer=tracer
        )

    def plan(self, flow: Flow | None) -> Plan:
        """What the planner is told for a change made now (a fresh nonce for each)."""
        return Plan(
            nonce=secrets.token_hex(16),
            definition=flow,
            queues=self.queues,
            now=self.clock.now(),
            kinds=self.kinds,
            history_limit=self.limits.history_limit,
            retention_s=self.limits.retention_s,
            p95_s=self.breakers.p95_s if self.breakers is not None else None,
            undo_window_s=self.limits.undo_window_s,
            undo_initial_s=self.limits.undo_initial_s,
            undo_max_interval_s=self.limits.undo_max_interval_s,
            poll_chain=self.limits.poll_chain,
            codec=self.codec,
        )

    def stored(
        self, output: object, record: FlowRecord, *, step: str, where: str, checked: bool = False
    ) -> Outcome:
        """Step ``step``'s output as ``record``'s document stores it (``Completed``: its
        sensitive fields sealed, offloaded if large), or why it cannot be (``Failed``:
        INVALID_OUTPUT; ``Retry``: the bucket is unreachable). ``checked``: it is known
        storable and within ``sizes`` already."""
        if not isinstance(output, dict):
            message = f"{where} is a {type(output).__name__}; a handler returns a dict or None"
            return Failed(PermanentError(message, code="INVALID_OUTPUT"))
        try:
            if not checked:
                check_storable(output, where=where, max_bytes=self.sizes.output_bytes)
            return Completed(self.codec.encode(output, Slot.of(record, "outputs", step)))
        except UnstorableValue as exc:
            return Failed(PermanentError(str(exc), code="INVALID_OUTPUT"))
        except PayloadUnavailable as exc:
            return Retry(exc)

    def loaded(self, stored: Any, record: FlowRecord, *path: str, scope: str | None = None) -> Any:
        """``record``'s value at ``path`` (``"input"``; ``"outputs", step``) as its handlers
        see it: offloaded values read back (PayloadMissing, PayloadCorrupt,
        PayloadUnavailable), sealed ones opened (UnreadableSealedValue). ``scope``: a value
        ForEach ``scope``'s lane stored (an item's effect's output, undone by its flow)."""
        slot = Slot.of(record, *path)
        return self.codec.decode(stored, replace(slot, scope=scope) if scope else slot)

    def resolved(self, stored: Any, record: FlowRecord) -> Any:
        """A value of ``record``'s as a reader other than its handlers is given it (the api's
        ``?resolve=true``, the harness, a ForEach's join): offloaded values read back, sealed
        ones left sealed (the api shows them ``[redacted]``, or opens them for a sensitive
        reader: ``web.redaction``)."""
        return self.resolving.decode(stored, Slot.of(record))

    def plan_for(self, record: FlowRecord) -> Plan:
        """The plan for a change to ``record`` (a lane's: with its item steps)."""
        return self.plan(self.planning_flow(record))

    def planning_flow(self, record: FlowRecord) -> Flow:
        """What plans ``record``: its flow's definition, or a lane's item steps."""
        flow = self.definition(record)[0]
        if record.is_lane and record.scope is not None:
            return foreach.item_flow(flow, record.scope)
        return flow

    def definition(self, record: FlowRecord) -> tuple[Flow, str]:
        """The definition to plan ``record`` with, and why it is not the flow's own version
        ('' when it is). A version that is no longer registered is planned (compensated) with
        the newest one; UnknownFlow if no version of the flow is registered."""
        try:
            return self.registry.get(record.flow, record.version), ""
        except UnknownVersion as gone:
            return self.registry.get(record.flow), str(gone)

    def budget_s(self, task: TaskKind) -> float:
        """How long a handler of ``task`` may run: its queue's dispatch deadline, less room."""
        waits = self.kinds.waits(task)
        return self.limits.poll_budget_s if waits else self.limits.action_budget_s

    def read(self, flow_id: str) -> Snapshot | None:
        """The flow as stored; a document that no longer parses is ended FAILED (UNREADABLE)
        and its task dropped, since no task could ever run it."""
        try:
            return self.store.read(flow_id)
        except UnreadableFlow as unreadable:
            log.error("unreadable flow", extra={"flow_id": flow_id, "error": str(unreadable)})
            self.store.fail_unreadable(flow_id, reason=str(unreadable), now=self.clock.now())
            return None

    def write(
        self,
        found: Snapshot,
        change: Change,
        *,
        marks: list[bool] | None = None,
        then: Then | None = None,
    ) -> Ran:
        """Write ``change`` starting from ``found``; settle what follows it. ``marks``: what
        ``change`` says of its last call — whether it marked the result sent
        (``focus.marked``); ``then``: what runs next in this request instead of settling, if
        it says so."""
        try:
            committed = self.store.change_versioned(found.record.key, change, start=found)
        except UnstorableChange as refused:
            return self._refused(found, refused)
        if committed is None:
            latest = self.store.get(found.record.key)
            if latest is not None:
                self.settle(latest)
            return Ran.STALE
        if then is not None:
            went = then(committed)
            if went is not None:
                return went
        self.settle(committed.record, version=committed, marked=bool(marks and marks[-1]))
        return Ran.ADVANCED

    def _refused(self, found: Snapshot, refused: UnstorableChange) -> Ran:
        """The store refused the write for good (too large, too many index entries, invalid):
        retrying it would fail for ever, so the flow ends FAILED (COMMIT_REFUSED), recording
        only that — a small write that the store takes."""
        log.error("commit refused", extra={"flow_id": found.record.flow_id, "error": str(refused)})
        plan = self.plan(None)
        position = found.record.position
        message = f"the store refused the flow's next state: {refused}"[:1000]

        def ended(latest: FlowRecord) -> FlowRecord | None:
            current = focused_at(latest, position, found.carried)
            if current is None:
                return None
            return planner.abort(plan, current, code="COMMIT_REFUSED", message=message)

        committed = self.store.change_versioned(found.record.key, ended)
        if committed is not None:
            self.settle(committed.record, version=committed)
        return Ran.ADVANCED

    def settle(
        self, record: FlowRecord, *, version: Snapshot | None = None, marked: bool = False
    ) -> None:
        """Make sure what must follow a committed record has happened (safe to repeat).

        An active flow needs its next task to exist; a terminal one needs its result event.
        Both are idempotent: the task name dedups, and ``result_published`` is remembered.
        Both happen in the flow's trace, whoever settles it (a task, the sweeper, an operator).
        ``version``, the snapshot just written, spares the publish mark a read; ``marked``:
        that write ended the flow and marked its result sent, so it is published here.
        """
        if record.is_lane:
            self._settle_lane(record)
        if record.status in TERMINAL and record.slot is not None:  # room for the next waiting
            self.admission.pass_on(self.plan_for, record, self.clock.now(), self.settle)
        with tracing.joined(record.trace):
            if record.status in ACTIVE or record.cleaning:  # a clean-up has tasks too
                for track in record.tracks.values():
                    if track.next is not None:
                        self.queue.ensure(record.key, track.next)
            # A child's end (and its undo's) wakes its parent, before its result event goes
            # out: once that is marked sent, the wake exists (the sweeper republishes one
            # that is not, and settles the child again).
            for parent, wake in wakes(record):
                self.queue.ensure(parent, wake)
            # A lane's end is news for its flow, not a result event.
            if record.status in TERMINAL and record.result and not record.is_lane:
                if not record.result_published:
                    self.results.publish(record, version)
                elif marked:
                    self.results.publish(record, version, marked=True)

    def admit(self, tenant: str) -> int:
        """Admit ``tenant``'s waiting flows while it has room; how many."""
        return self.admission.admit(self.plan_for, tenant, self.clock.now(), self.settle)

    def _settle_lane(self, lane: FlowRecord) -> None:
        """A lane's own part of settling: page its items' outputs, tell its flow its news."""
        if self.offload is not None and payloads.page_due(lane):
            self._page(lane)
        if foreach.news(lane) is not None:
            self._report_lane(lane)

    def _page(self, lane: FlowRecord) -> None:
        """Move a lane's items' outputs into a page object, so its document stays small
        however many items it runs. Best effort: a lane that could not page now pages when
        it is settled next (its document has room for several pages' worth)."""
        assert self.offload is not None
        moved = dict(lane.item_outputs)
        try:
            page = self.offload.put(payloads.serialized(moved), Slot.of(lane))
            self.store.change(lane.key, lambda current: payloads.paged(current, page, moved))
        except (RetryableError, UnstorableChange):
            log.warning("lane outputs not paged", extra={"flow_id": lane.flow_id}, exc_info=True)

    def _report_lane(self, lane: FlowRecord) -> None:
        """Tell a lane's flow what the lane has not told it yet (items failed, lane ended)."""
        try:
            parent_flow = self.definition(lane)[0]
        except UnknownFlow:
            return  # the flow ends by its own task
        written = foreach.report(self.store, self.plan(parent_flow), lane)
        if written is not None:
            self.settle(written)
        foreach.mark_reported(self.store, lane)

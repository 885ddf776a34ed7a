"""What the engine needs from the outside world, as protocols.

The Google adapters (``relayflow.gcp``) are one implementation; ``relayflow.testing``'s
in-memory ones are another. The engine depends only on these.

The store is six families, one per kind of caller (flow documents, the sweeper's recovery
queries, tenant slots, tenant states, listings, rejections); ``Store`` is all of them at once,
and each caller is typed against only the families it uses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from relayflow.core.errors import RelayflowError
from relayflow.core.listing import Cursor, FlowFilter, FlowSummary, Page, RejectedMessage
from relayflow.core.position import PollNote, TaskPayload
from relayflow.core.records import FlowRecord, HistoryEntry, NextTask
from relayflow.core.state import Status

# Called with the current record; returns the record to write, or None to write nothing.
Change = Callable[[FlowRecord], FlowRecord | None]


@dataclass(frozen=True)
class Snapshot:
    """A flow as read, with the document's version (what a conditional write names)."""

    record: FlowRecord
    version: datetime
    # The document's fields as they are stored at ``version``, when the store knows them: a
    # write from this snapshot then sends only what changed. Not for the engine to read.
    stored: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    # A poll chain's task: the polls it carried that the document has not recorded yet
    # (``record`` has them already). A write from this snapshot records them too.
    carried: tuple[HistoryEntry, ...] = field(default=(), compare=False, repr=False)


@dataclass(frozen=True)
class Unreadable:
    """A flow document a query found that no longer parses as a flow."""

    flow_id: str
    reason: str


class UnreadableFlow(RelayflowError):
    """Raised when a flow document exists but no longer parses as a flow."""


class UnstorableChange(RelayflowError):
    """Raised when the store refuses a write for good (too large, too many index entries,
    an invalid value): the same write would fail on every retry."""


class Enqueued(StrEnum):
    """What an enqueue did."""

    CREATED = "created"
    ALREADY_ENQUEUED = "already enqueued"


@dataclass(frozen=True)
class SlotGrant:
    """What asking for a tenant slot gave: a slot, or none (and, if one is only resting after
    its last use, when the first becomes free)."""

    slot: str | None
    free_at: datetime | None = None


@dataclass(frozen=True)
class TenantState:
    """What operators set on a tenant at run time."""

    tenant: str
    paused: bool = False
    by: str = ""
    reason: str = ""
    at: datetime | None = None  # when it was last paused or resumed (None: never, or unknown)


class FlowDocuments(Protocol):
    """Flow documents, read whole and changed only by compare-and-set: what the engine's
    delivery, intake, operations and ForEach lanes (``core.foreach``) read and write, and what
    admission changes a waiting flow through.

    Flows are named by their key (``FlowRecord.key``: the id for the default tenant's flows,
    ``{tenant}~{id}`` for another's; a lane's id); ``find`` looks them up by id."""

    def create(self, record: FlowRecord) -> bool:
        """Create the flow document; False if one with that id exists already."""
        ...

    def read(self, flow_id: str) -> Snapshot | None:
        """The flow and its version, or None."""
        ...

    def get(self, flow_id: str) -> FlowRecord | None:
        """The flow, or None."""
        ...

    def change(
        self, flow_id: str, change: Change, *, start: Snapshot | None = None
    ) -> FlowRecord | None:
        """Apply ``change`` atomically; the new record, or None if nothing was written."""
        ...

    def change_versioned(
        self, flow_id: str, change: Change, *, start: Snapshot | None = None
    ) -> Snapshot | None:
        """Apply ``change`` atomically; the new record and its version."""
        ...

    def find(self, flow_id: str, *, limit: int = 10) -> list[FlowRecord]:
        """Every tenant's flow whose id (not key) is ``flow_id``."""
        ...

    def mark_published(
        self, flow_id: str, generation: int, *, start: Snapshot | None = None
    ) -> bool:
        """Remember that ``generation``'s result event went out."""
        ...


class Recovery(Protocol):
    """The sweeper's queries: flows whose task is overdue, documents that no longer parse,
    results that never went out."""

    def overdue(self, *, cutoff: datetime, limit: int = 100) -> list[FlowRecord | Unreadable]:
        """Active flows whose next task should have run before ``cutoff``, most overdue first
        (and any document there that no longer parses)."""
        ...

    def fail_unreadable(self, flow_id: str, *, reason: str, now: datetime) -> None:
        """End a document that no longer parses FAILED (UNREADABLE), field by field."""
        ...

    def unpublished(self, *, cutoff: datetime, limit: int = 100) -> list[FlowRecord]:
        """Flows that ended before ``cutoff`` whose result event never went out."""
        ...


class TenantSlots(Protocol):
    """A limited tenant's running slots and the flows waiting for one: what admission
    (``core.admission``) takes, hands over and gives back, and what the sweeper and the
    tenants' view count."""

    def acquire_slot(
        self, tenant: str, *, slots: int, holder: str, now: datetime, cooldown_s: float
    ) -> SlotGrant:
        """Take one of ``tenant``'s ``slots`` running slots for flow ``holder`` (each slot a
        document of its own, so starts do not contend for one); it rests ``cooldown_s`` after
        it is taken before it can be taken again."""
        ...

    def release_slot(self, slot: str, *, holder: str) -> bool:
        """Give back ``holder``'s slot; False if it does not hold it (released already)."""
        ...

    def hand_over_slot(
        self, slot: str, *, holder: str, to: str, now: datetime, cooldown_s: float
    ) -> bool:
        """Pass ``holder``'s slot straight to flow ``to`` (one write, no slot read by query);
        False if ``holder`` no longer holds it or it still rests (the caller releases it)."""
        ...

    def waiting(self, tenant: str | None = None, *, limit: int = 10) -> list[FlowRecord]:
        """Flows waiting for room (of ``tenant``), those queued first first."""
        ...

    def count_waiting(self, tenant: str) -> int:
        """How many of ``tenant``'s flows wait for room (a count, not a read of each)."""
        ...


class TenantStates(Protocol):
    """What operators set on tenants at run time: admission reads and sets it, the tenants'
    view lists it."""

    def tenant_state(self, tenant: str) -> TenantState:
        """What operators set on ``tenant`` (not paused, if nothing)."""
        ...

    def set_tenant_state(self, state: TenantState) -> None:
        """Pause or resume a tenant."""
        ...

    def tenant_states(self) -> list[TenantState]:
        """Every tenant an operator ever paused or resumed."""
        ...


class Listing(Protocol):
    """What operators list, a page at a time: the api, the console, the CLI (through the
    api) and the tenants' view."""

    def recent(
        self,
        *,
        status: Status | None = None,
        flow: str | None = None,
        version: int | None = None,
        limit: int = 50,
    ) -> list[FlowRecord]:
        """Flows, newest update first, optionally of one status, flow and version."""
        ...

    def flows(
        self, filter: FlowFilter, *, after: Cursor | None = None, limit: int = 50
    ) -> Page[FlowRecord]:
        """Whole documents of the flows ``filter`` admits, newest update first, from after
        ``after``."""
        ...

    def summaries(
        self, filter: FlowFilter, *, after: Cursor | None = None, limit: int = 50
    ) -> Page[FlowSummary]:
        """``flows``, as summaries (read as a projection: a fraction of each document)."""
        ...

    def count_by_status(
        self, filter: FlowFilter, *, statuses: Iterable[Status] | None = None
    ) -> dict[Status, int]:
        """How many flows ``filter`` admits in each status (its own status aside); only in
        ``statuses`` when given (the others 0, not counted: counting costs a read per 1,000
        index entries, and ended flows pile up)."""
        ...

    def matching(self, filter: FlowFilter, *, limit: int) -> list[FlowRecord]:
        """Whole documents of every flow ``filter`` admits, in no order, but at most ``limit``
        and one more (which says there are more): a bulk action's dry run, which needs them
        all once, not a page in order."""
        ...

    def rejected_messages(
        self, *, after: Cursor | None = None, limit: int = 50
    ) -> Page[RejectedMessage]:
        """Refused messages with their reasons, newest first, from after ``after``."""
        ...


class Rejections(Protocol):
    """Where intake and the worker record a message or task they refuse, kept apart from the
    flows (listed by ``Listing.rejected_messages``)."""

    def reject(self, doc_id: str, record: dict[str, Any]) -> None:
        """Record a refused message under its id (idempotent for a redelivery)."""
        ...


class Store(FlowDocuments, Recovery, TenantSlots, TenantStates, Listing, Rejections, Protocol):
    """An adapter that is every family: what the composition root hands out. A caller that
    needs only some of it is typed against those families."""


class Queue(Protocol):
    """Tasks under deterministic names; a name once used is never accepted again."""

    def ensure(self, flow_id: str, nxt: NextTask, chain: Sequence[PollNote] = ()) -> Enqueued:
        """Create the task for ``nxt`` unless it exists (or existed) under its name; a poll
        chain's next task carries ``chain`` in its body."""
        ...

    def pending(self, flow_id: str, tasks: Sequence[NextTask]) -> TaskPayload | None:
        """The body of the last of ``tasks`` still in its queue (a poll chain's candidates,
        oldest first), or None if none is."""
        ...

    def run_now(self, nxt: NextTask) -> bool:
        """Dispatch a scheduled task now (Cloud Tasks' RunTask); False if it is gone."""
        ...

    def exists(self, nxt: NextTask) -> bool:
        """Whether the task is still in its queue (waiting or being retried)."""
        ...


class Blobs(Protocol):
    """Objects in one bucket (Cloud Storage): where values too large for a flow document go
    (``core.payloads``). Names are chosen by content, so writing one twice is harmless."""

    @property
    def bucket(self) -> str:
        """The bucket new objects are written to."""
        ...

    def put(self, name: str, data: bytes) -> None:
        """Write object ``name`` unless it exists (PayloadUnavailable if the bucket cannot
        be reached)."""
        ...

    def get(self, bucket: str, name: str) -> bytes | None:
        """Object ``name`` of ``bucket``, or None if there is none (PayloadUnavailable if
        the bucket cannot be reached)."""
        ...


class Events(Protocol):
    """Where a terminal flow announces its result."""

    def publish_result(self, record: FlowRecord) -> str:
        """Publish the flow's result event; the message id."""
        ...

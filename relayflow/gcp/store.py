"""Flow state in Firestore: ``flows/{flow_id}`` documents, changed only by compare-and-set."""

from __future__ import annotations

import functools
import itertools
import logging
import random
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any, TypeVar

from google.api_core.exceptions import (
    Aborted,
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
)
from google.cloud import firestore
from google.cloud.firestore_v1.field_path import FieldPath
from pydantic import BaseModel, ValidationError

from relayflow.core import planner
from relayflow.core.listing import (
    SUMMARY_FIELDS,
    Cursor,
    FlowFilter,
    FlowSummary,
    Page,
    RejectedMessage,
)
from relayflow.core.ports import (
    Change,
    SlotGrant,
    Snapshot,
    TenantState,
    Unreadable,
    UnreadableFlow,
    UnstorableChange,
)
from relayflow.core.records import FlowRecord
from relayflow.core.state import ACTIVE, CLEANABLE, Status
from relayflow.gcp import documents
from relayflow.settings import Settings
from relayflow.telemetry import Counters

log = logging.getLogger("relayflow.gcp.store")

# Each conflict means another writer succeeded; a flow sees a few at once, never dozens.
CHANGE_ATTEMPTS = 32
# Every call is bounded: a handler must answer well inside its Cloud Tasks dispatch deadline
# (and the start function inside its Pub/Sub ack deadline) rather than hang on a dead backend.
RPC_TIMEOUT_S = 15.0
_Item = TypeVar("_Item", bound=BaseModel)


def build_client(settings: Settings) -> firestore.Client:
    """A Firestore client; the library itself honours FIRESTORE_EMULATOR_HOST."""
    return firestore.Client(project=settings.project_id)


class FlowStore:
    """Reads and compare-and-set writes of flow documents, and the ``rejected`` record."""

    def __init__(
        self,
        client: firestore.Client,
        *,
        flows: str = "flows",
        rejected: str = "rejected",
        lanes: str = "flow_lanes",
        slots: str = "tenant_slots",
        tenants: str = "tenants",
        counters: Counters | None = None,
    ) -> None:
        self._client = client
        self._docs = documents.Documents(client)
        self._flows = client.collection(flows)
        # ForEach lanes live apart: listings of flows never see them; the sweeper does.
        self._lanes = client.collection(lanes)
        # Tenants: one document per running slot, one per tenant an operator paused.
        self._slots = client.collection(slots)
        self._tenants = client.collection(tenants)
        self._rejected = client.collection(rejected)
        self._counters = counters or Counters()

    @property
    def client(self) -> firestore.Client:
        return self._client

    def create(self, record: FlowRecord) -> bool:
        """Create the flow document; False if one with that id exists already."""
        self._counters.add("firestore_writes")
        try:
            self._docs.create(self._path(record.key), record.to_doc(), timeout=RPC_TIMEOUT_S)
        except AlreadyExists:
            return False
        return True

    def read(self, flow_id: str) -> Snapshot | None:
        """The flow and its version, or None."""
        self._counters.add("firestore_reads")
        found = self._docs.get(self._path(flow_id), timeout=RPC_TIMEOUT_S)
        if found is None:
            return None
        fields, version = found
        try:
            record = FlowRecord.from_doc(fields)
        except ValidationError as exc:
            raise UnreadableFlow(f"flow {flow_id} no longer parses: {_first_error(exc)}") from exc
        return Snapshot(record, version, fields)

    def get(self, flow_id: str) -> FlowRecord | None:
        """The flow, or None."""
        found = self.read(flow_id)
        return found.record if found else None

    def change(
        self, flow_id: str, change: Change, *, start: Snapshot | None = None
    ) -> FlowRecord | None:
        """Apply ``change`` to the current record atomically; the new record, or None."""
        written = self.change_versioned(flow_id, change, start=start)
        return written.record if written else None

    def change_versioned(
        self, flow_id: str, change: Change, *, start: Snapshot | None = None
    ) -> Snapshot | None:
        """Apply ``change`` to the current record atomically; the new record and its version.

        Optimistic concurrency: the write carries the update time of the document it was
        computed from, and on a conflict the record is read again and ``change`` called again,
        so ``change`` must be a pure function of its argument. (A read-then-write transaction
        deadlocks when several handlers change one flow at once; the emulator breaks each
        deadlock with a 2 s lock timeout and soon gives up. A precondition never locks.)
        ``start``, a snapshot the caller has just read, saves the first read.
        """
        path = self._path(flow_id)
        for _ in range(CHANGE_ATTEMPTS):
            current, start = start or self.read(flow_id), None
            if current is None:
                return None
            updated = change(current.record)
            if updated is None:
                return None
            doc = updated.to_doc()  # every field; only those that changed are sent
            fields, appends = documents.write_of(current.stored, doc)
            if not fields and not appends:  # nothing to write: the document already says it
                return Snapshot(updated, current.version, current.stored)
            self._counters.add("firestore_writes")
            try:
                version, size = self._docs.update(
                    path,
                    fields,
                    unchanged_since=current.version,
                    timeout=RPC_TIMEOUT_S,
                    append=appends,
                )
            except (FailedPrecondition, NotFound):
                # somebody changed (or removed) it since the read: read again
                self._counters.add("firestore_conflicts")
                continue
            except InvalidArgument as exc:  # too large, too many index entries: for good
                raise UnstorableChange(str(exc.message)[:500]) from exc
            self._counters.add("firestore_bytes_written", size)
            return Snapshot(updated, version, doc)
        message = f"flow {flow_id}: {CHANGE_ATTEMPTS} conflicting changes in a row"
        raise Aborted(message)  # type: ignore[no-untyped-call]

    def find(self, flow_id: str, *, limit: int = 10) -> list[FlowRecord]:
        """Every tenant's flow with the id ``flow_id`` (its field, not its key)."""
        query = self._flows.where(filter=firestore.FieldFilter("flow_id", "==", flow_id))
        found = list(self._parse(query.limit(limit).stream(timeout=RPC_TIMEOUT_S)))
        self._counters.add("firestore_reads", max(1, len(found)))
        return found

    def mark_published(
        self, flow_id: str, generation: int, *, start: Snapshot | None = None
    ) -> bool:
        """Remember that generation ``generation``'s result event went out; False if the flow
        has moved on since (an operator retried it), so a new generation's event is not lost.
        """

        mark = functools.partial(planner.published, generation=generation)
        return self.change(flow_id, mark, start=start) is not None

    def recent(
        self,
        *,
        status: Status | None = None,
        flow: str | None = None,
        version: int | None = None,
        limit: int = 50,
    ) -> list[FlowRecord]:
        """Flows, newest update first, optionally of one status, flow and version."""
        query: Any = self._flows
        for field, value in (("status", status), ("flow", flow), ("version", version)):
            if value is not None:
                plain = value.value if isinstance(value, Status) else value
                query = query.where(filter=firestore.FieldFilter(field, "==", plain))
        query = query.order_by("updated_at", direction=firestore.Query.DESCENDING).limit(limit)
        records = [
            FlowRecord.from_doc(s.to_dict() or {}) for s in query.stream(timeout=RPC_TIMEOUT_S)
        ]
        self._counters.add("firestore_reads", max(1, len(records)))
        return records

    def overdue(self, *, cutoff: datetime, limit: int = 100) -> list[FlowRecord | Unreadable]:
        """Active flows (and ended ones whose clean-up runs) whose next task should have run
        before ``cutoff``, most overdue first (and any document there that no longer parses,
        so the sweeper can end it). An ended flow has ``next_run_at`` only while it cleans up,
        so the same (status, next_run_at) index finds those; lanes never clean up."""
        found: list[tuple[datetime, FlowRecord | Unreadable]] = []
        queried = [
            *itertools.product((self._flows, self._lanes), sorted(ACTIVE)),
            *((self._flows, status) for status in sorted(CLEANABLE)),
        ]
        for collection, status in queried:
            query = (
                collection.where(filter=firestore.FieldFilter("status", "==", status.value))
                .where(filter=firestore.FieldFilter("next_run_at", "<", cutoff))
                .order_by("next_run_at")
                .limit(limit)
            )
            for snap in query.stream(timeout=RPC_TIMEOUT_S):
                due = (snap.to_dict() or {}).get("next_run_at") or cutoff
                found.append((due, self._parse_one(snap)))
        self._counters.add("firestore_reads", max(1, len(found)))
        found.sort(key=lambda pair: pair[0])
        return [flow for _, flow in found[:limit]]

    def fail_unreadable(self, flow_id: str, *, reason: str, now: datetime) -> None:
        """End a document that no longer parses FAILED (UNREADABLE) with field updates that
        need no parsing: no task can run it, and left active it would be swept for ever."""
        error = {"code": "UNREADABLE", "message": reason[:1000]}
        fields = {
            "status": Status.FAILED.value,
            "result": {"status": Status.FAILED.value, **error, "data": None, "error": error},
            "next": None,
            "next_run_at": None,
            "claim": None,
            "finished_at": now,
            "updated_at": now,
            "result_published": True,  # nothing can be said on flow-results about it
        }
        self._counters.add("firestore_writes")
        self._doc(flow_id).update(fields, timeout=RPC_TIMEOUT_S)

    def unpublished(self, *, cutoff: datetime, limit: int = 100) -> list[FlowRecord]:
        """Flows that ended before ``cutoff`` whose result event never went out (and ForEach
        lanes that ended without their flow hearing of it)."""
        found: list[FlowRecord] = []
        for collection in (self._flows, self._lanes):
            query = (
                collection.where(filter=firestore.FieldFilter("result_published", "==", False))
                .where(filter=firestore.FieldFilter("finished_at", "<", cutoff))
                .order_by("finished_at")
                .limit(limit)
            )
            found += self._parse(query.stream(timeout=RPC_TIMEOUT_S))
        self._counters.add("firestore_reads", max(1, len(found)))
        return found[:limit]

    def _path(self, flow_id: str) -> str:
        """A flow's document path, or a ForEach lane's (its id has dots)."""
        collection = self._lanes if "." in flow_id else self._flows
        return self._docs.path(collection.id, flow_id)

    def _doc(self, flow_id: str) -> Any:
        """A flow's document, or a ForEach lane's (its id has dots)."""
        collection = self._lanes if "." in flow_id else self._flows
        return collection.document(flow_id)

    def _parse(self, snapshots: Iterable[Any]) -> Iterator[FlowRecord]:
        """Records from query results; one that no longer parses is logged and skipped, so a
        single bad document cannot stop a listing."""
        for snap in snapshots:
            parsed = self._parse_one(snap)
            if isinstance(parsed, FlowRecord):
                yield parsed

    def _parse_one(self, snap: Any) -> FlowRecord | Unreadable:
        try:
            return FlowRecord.from_doc(snap.to_dict() or {})
        except ValidationError as exc:
            log.error("unreadable flow document", extra={"doc": snap.id, "error": str(exc)})
            return Unreadable(flow_id=snap.id, reason=f"no longer parses: {_first_error(exc)}")

    # -- tenants ------------------------------------------------------------------------------

    def acquire_slot(
        self, tenant: str, *, slots: int, holder: str, now: datetime, cooldown_s: float
    ) -> SlotGrant:
        """A free slot taken by a write conditioned on its version (a rival taking it first
        makes this try the next); slot documents are made on first use."""
        query = self._slots.where(filter=firestore.FieldFilter("tenant", "==", tenant))
        known = list(query.stream(timeout=RPC_TIMEOUT_S))
        self._counters.add("firestore_reads", max(1, len(known)))
        taken = {"holder": holder, "taken_at": now, "free_at": now + timedelta(seconds=cooldown_s)}
        resting: list[datetime] = []
        free = []
        for snap in known:
            doc = snap.to_dict() or {}
            if doc.get("holder") is not None or int(doc.get("slot", slots)) >= slots:
                continue  # held, or beyond the tenant's limit (it was lowered)
            free_at = doc.get("free_at")
            if free_at is not None and free_at > now:
                resting.append(free_at)
            else:
                free.append(snap)
        random.shuffle(free)  # rivals start at different slots
        for snap in free:
            option = self._client.write_option(last_update_time=snap.update_time)
            try:
                self._counters.add("firestore_writes")
                snap.reference.update(taken, option=option, timeout=RPC_TIMEOUT_S)
                return SlotGrant(snap.id)
            except (FailedPrecondition, NotFound):
                self._counters.add("firestore_conflicts")
        numbers = {int((s.to_dict() or {}).get("slot", -1)) for s in known}
        for k in (n for n in range(slots) if n not in numbers):
            slot_id = f"{tenant}.{k}"
            try:
                self._counters.add("firestore_writes")
                self._slots.document(slot_id).create(
                    {"tenant": tenant, "slot": k, **taken}, timeout=RPC_TIMEOUT_S
                )
                return SlotGrant(slot_id)
            except AlreadyExists:
                self._counters.add("firestore_conflicts")
        return SlotGrant(None, min(resting, default=None))

    def release_slot(self, slot: str, *, holder: str) -> bool:
        ref = self._slots.document(slot)
        snap = ref.get(timeout=RPC_TIMEOUT_S)
        self._counters.add("firestore_reads")
        if not snap.exists or (snap.to_dict() or {}).get("holder") != holder:
            return False
        option = self._client.write_option(last_update_time=snap.update_time)
        try:
            self._counters.add("firestore_writes")
            ref.update({"holder": None}, option=option, timeout=RPC_TIMEOUT_S)
        except (FailedPrecondition, NotFound):
            return False
        return True

    def hand_over_slot(
        self, slot: str, *, holder: str, to: str, now: datetime, cooldown_s: float
    ) -> bool:
        ref = self._slots.document(slot)
        snap = ref.get(timeout=RPC_TIMEOUT_S)
        self._counters.add("firestore_reads")
        doc = snap.to_dict() or {} if snap.exists else {}
        free_at = doc.get("free_at")
        if doc.get("holder") != holder or (free_at is not None and free_at > now):
            return False
        taken = {"holder": to, "taken_at": now, "free_at": now + timedelta(seconds=cooldown_s)}
        option = self._client.write_option(last_update_time=snap.update_time)
        try:
            self._counters.add("firestore_writes")
            ref.update(taken, option=option, timeout=RPC_TIMEOUT_S)
        except (FailedPrecondition, NotFound):
            self._counters.add("firestore_conflicts")
            return False
        return True

    def waiting(self, tenant: str | None = None, *, limit: int = 10) -> list[FlowRecord]:
        query: Any = self._flows.where(filter=firestore.FieldFilter("admission", "==", "waiting"))
        if tenant is not None:
            query = query.where(filter=firestore.FieldFilter("tenant", "==", tenant))
        query = query.order_by("queued_at").limit(limit)
        found = [
            r
            for r in self._parse(query.stream(timeout=RPC_TIMEOUT_S))
            if r.status is Status.PENDING
        ]
        self._counters.add("firestore_reads", max(1, len(found)))
        return found

    def count_waiting(self, tenant: str) -> int:
        query: Any = self._flows.where(
            filter=firestore.FieldFilter("admission", "==", "waiting")
        ).where(filter=firestore.FieldFilter("tenant", "==", tenant))
        (result,) = query.count(alias="n").get(timeout=RPC_TIMEOUT_S)
        self._counters.add("firestore_reads")
        return int(result[0].value)

    def tenant_state(self, tenant: str) -> TenantState:
        snap = self._tenants.document(tenant).get(timeout=RPC_TIMEOUT_S)
        self._counters.add("firestore_reads")
        doc = snap.to_dict() or {} if snap.exists else {}
        return TenantState(
            tenant, bool(doc.get("paused")), str(doc.get("by", "")), str(doc.get("reason", ""))
        )

    def set_tenant_state(self, state: TenantState) -> None:
        self._counters.add("firestore_writes")
        body = {"paused": state.paused, "by": state.by, "reason": state.reason}
        self._tenants.document(state.tenant).set(body, timeout=RPC_TIMEOUT_S)

    def tenant_states(self) -> list[TenantState]:
        found = []
        for snap in self._tenants.stream(timeout=RPC_TIMEOUT_S):
            doc = snap.to_dict() or {}
            found.append(
                TenantState(
                    snap.id,
                    bool(doc.get("paused")),
                    str(doc.get("by", "")),
                    str(doc.get("reason", "")),
                )
            )
        self._counters.add("firestore_reads", max(1, len(found)))
        return found

    def reject(self, doc_id: str, record: dict[str, Any]) -> None:
        """Record a refused message under its id (idempotent for a redelivery)."""
        self._counters.add("firestore_writes")
        self._rejected.document(doc_id).set(record, timeout=RPC_TIMEOUT_S)

    def rejected(self, doc_id: str) -> dict[str, Any] | None:
        """A rejected-message record, or None."""
        self._counters.add("firestore_reads")
        snap = self._rejected.document(doc_id).get(timeout=RPC_TIMEOUT_S)
        return snap.to_dict() if snap.exists else None

    # -- what operators list -------------------------------------------------------------------
    #
    # Each filter combination with the (updated_at, flow_id) order needs a composite index in
    # the cloud (the emulator needs none); see the README's "Console and operations".

    def flows(
        self, filter: FlowFilter, *, after: Cursor | None = None, limit: int = 50
    ) -> Page[FlowRecord]:
        """Whole documents of the flows ``filter`` admits, newest update first."""
        query = self._listing(filter, after=after, limit=limit)
        return self._page(query, limit, lambda snap: FlowRecord.from_doc(_doc(snap)))

    def summaries(
        self, filter: FlowFilter, *, after: Cursor | None = None, limit: int = 50
    ) -> Page[FlowSummary]:
        """``flows`` as summaries, read as a projection: a fraction of each document."""
        query = self._listing(filter, after=after, limit=limit).select(SUMMARY_FIELDS)
        return self._page(query, limit, lambda snap: FlowSummary.from_doc(_doc(snap)))

    def count_by_status(self, filter: FlowFilter) -> dict[Status, int]:
        """How many flows ``filter`` admits in each status: one count aggregation per status
        (billed one read per 1,000 entries), run side by side."""
        admitted = filter.without_status()

        def count(status: Status) -> int:
            query = self._filtered(admitted).where(
                filter=firestore.FieldFilter("status", "==", status.value)
            )
            (result,) = query.count(alias="n").get(timeout=RPC_TIMEOUT_S)
            return int(result[0].value)

        with ThreadPoolExecutor(max_workers=len(Status)) as pool:
            counts = dict(zip(Status, pool.map(count, Status), strict=True))
        self._counters.add("firestore_reads", len(Status))
        return counts

    def rejected_messages(
        self, *, after: Cursor | None = None, limit: int = 50
    ) -> Page[RejectedMessage]:
        """Refused messages with their reasons, newest first."""
        by_id = FieldPath.document_id()
        query: Any = self._rejected.order_by(
            "rejected_at", direction=firestore.Query.DESCENDING
        ).order_by(by_id, direction=firestore.Query.DESCENDING)
        if after is not None:
            start = {"rejected_at": after.at, by_id: self._rejected.document(after.id)}
            query = query.start_after(start)
        query = query.limit(limit + 1)

        def parse(snap: Any) -> RejectedMessage:
            return RejectedMessage.from_doc(snap.id, _doc(snap))

        return self._page(query, limit, parse, at_field="rejected_at")

    def _filtered(self, filter: FlowFilter) -> Any:
        query: Any = self._flows
        for field, value in filter.equalities():
            query = query.where(filter=firestore.FieldFilter(field, "==", value))
        bounds = (("updated_at", ">=", filter.updated_from), ("updated_at", "<", filter.updated_to))
        for field, op, bound in bounds:
            if bound is not None:
                query = query.where(filter=firestore.FieldFilter(field, op, bound))
        return query

    def _listing(self, filter: FlowFilter, *, after: Cursor | None, limit: int) -> Any:
        """The query for one page: newest update first, ties by id; one more than ``limit``,
        to know whether a next page exists."""
        descending = firestore.Query.DESCENDING
        query = (
            self._filtered(filter)
            .order_by("updated_at", direction=descending)
            .order_by("flow_id", direction=descending)
        )
        if after is not None:
            query = query.start_after({"updated_at": after.at, "flow_id": after.id})
        return query.limit(limit + 1)

    def _page(
        self,
        query: Any,
        limit: int,
        parse: Callable[[Any], _Item],
        *,
        at_field: str = "updated_at",
    ) -> Page[_Item]:
        """One page of ``query``'s results. A document that does not parse is logged and left
        out, but still counts for where the page ends, so it cannot hide the pages after it."""
        snaps = list(query.stream(timeout=RPC_TIMEOUT_S))
        self._counters.add("firestore_reads", max(1, len(snaps)))
        shown = snaps[:limit]
        items: list[_Item] = []
        for snap in shown:
            try:
                items.append(parse(snap))
            except ValidationError as exc:
                log.error("unreadable document", extra={"doc": snap.id, "error": str(exc)})
        last = shown[-1] if len(snaps) > limit and shown else None
        return Page(items, Cursor(_doc(last)[at_field], last.id) if last else None)


def _doc(snap: Any) -> dict[str, Any]:
    return snap.to_dict() or {}


def _first_error(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "document"
    return f"{where}: {first['msg']} ({error.error_count()} errors)"

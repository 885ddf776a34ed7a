"""In-memory implementations of the engine's ports (Store, Queue, Events).

They behave like the real services in the ways the engine relies on: a flow document is
written whole and goes through its Firestore form on every write; a conditional write against
a stale version is re-read; a task name, once used, is never accepted again (Cloud Tasks
answers ALREADY_EXISTS for it); the sweeper's overdue query is sorted by ``next_run_at`` as
Firestore sorts it. What they were asked is kept in plain lists and dicts a test can read.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError

from relayflow.core import planner
from relayflow.core.breaker_state import BreakerState, Counts, state_doc, state_from_doc
from relayflow.core.listing import (
    Cursor,
    FlowFilter,
    FlowSummary,
    Page,
    RejectedMessage,
    paged,
    record_cursor,
)
from relayflow.core.ports import (
    Change,
    Enqueued,
    SlotGrant,
    Snapshot,
    TenantState,
    Unreadable,
    UnreadableFlow,
    UnstorableChange,
)
from relayflow.core.position import TaskPayload
from relayflow.core.records import FlowRecord, NextTask, result_event
from relayflow.core.state import ACTIVE, Status

EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


class MemoryStore:
    """Flow documents and rejected-message records in dicts, changed whole like Firestore."""

    def __init__(self) -> None:
        self.docs: dict[str, dict[str, Any]] = {}
        self.rejected: dict[str, dict[str, Any]] = {}
        self.versions: dict[str, datetime] = {}
        self.writes = 0
        # Tenants: running slots (id -> holder, free_at) and what operators set.
        self.slots: dict[str, dict[str, Any]] = {}
        self.slot_writes = 0
        self.tenants: dict[str, TenantState] = {}
        # Fault injection: the next N writes fail as an outage would (ConnectionError) ...
        self.failing_writes = 0
        # ... and a document this says is unstorable is refused for good, as Firestore
        # refuses one over its size or index-entry limits (return why, or None to accept).
        self.refuse: Callable[[dict[str, Any]], str | None] = lambda doc: None

    def create(self, record: FlowRecord) -> bool:
        if record.key in self.docs:
            return False
        self._write(record)
        return True

    def read(self, flow_id: str) -> Snapshot | None:
        doc = self.docs.get(flow_id)
        if doc is None:
            return None
        try:
            record = FlowRecord.from_doc(doc)
        except ValidationError as exc:
            reason = f"flow {flow_id} no longer parses: {exc.error_count()} errors"
            raise UnreadableFlow(reason) from exc
        return Snapshot(record, self._version(flow_id))

    def get(self, flow_id: str) -> FlowRecord | None:
        found = self.read(flow_id)
        return None if found is None else found.record

    def change(
        self, flow_id: str, change: Change, *, start: Snapshot | None = None
    ) -> FlowRecord | None:
        written = self.change_versioned(flow_id, change, start=start)
        return written.record if written else None

    def change_versioned(
        self, flow_id: str, change: Change, *, start: Snapshot | None = None
    ) -> Snapshot | None:
        # Like the conditional write: a snapshot that is no longer current is read afresh.
        stale = start is None or start.version != self._version(flow_id)
        current = self.read(flow_id) if stale else start
        if current is None:
            return None
        updated = change(current.record)
        if updated is None:
            return None
        self._write(updated)
        return Snapshot(updated, self.versions[flow_id])

    def find(self, flow_id: str, *, limit: int = 10) -> list[FlowRecord]:
        return [r for r in self._records() if r.flow_id == flow_id and not r.is_lane][:limit]

    def mark_published(
        self, flow_id: str, generation: int, *, start: Snapshot | None = None
    ) -> bool:
        mark = functools.partial(planner.published, generation=generation)
        return self.change(flow_id, mark, start=start) is not None

    def overdue(self, *, cutoff: datetime, limit: int = 100) -> list[FlowRecord | Unreadable]:
        due: list[FlowRecord | Unreadable] = [
            r
            for r in self._parsed()
            if isinstance(r, Unreadable)
            or (
                (r.status in ACTIVE or r.cleaning)
                and r.next_run_at is not None
                and r.next_run_at < cutoff
            )
        ]
        return sorted(due, key=_due(cutoff))[:limit]

    def fail_unreadable(self, flow_id: str, *, reason: str, now: datetime) -> None:
        doc = self.docs[flow_id]
        error = {"code": "UNREADABLE", "message": reason}
        result = {"status": Status.FAILED.value, **error, "data": None, "error": error}
        doc.update(status=Status.FAILED.value, result=result, next=None, next_run_at=None)
        doc.update(finished_at=now, updated_at=now, claim=None, result_published=True)

    def unpublished(self, *, cutoff: datetime, limit: int = 100) -> list[FlowRecord]:
        ended = [
            r
            for r in self._records()
            if not r.result_published and r.finished_at is not None and r.finished_at < cutoff
        ]
        return sorted(ended, key=lambda r: r.finished_at or cutoff)[:limit]

    def recent(
        self,
        *,
        status: Status | None = None,
        flow: str | None = None,
        version: int | None = None,
        limit: int = 50,
    ) -> list[FlowRecord]:
        chosen = [
            r
            for r in self._records()
            if not r.is_lane
            if status in (None, r.status)
            and flow in (None, r.flow)
            and version in (None, r.version)
        ]
        return sorted(chosen, key=lambda r: r.updated_at, reverse=True)[:limit]

    def acquire_slot(
        self, tenant: str, *, slots: int, holder: str, now: datetime, cooldown_s: float
    ) -> SlotGrant:
        resting: list[datetime] = []
        for k in range(slots):
            slot_id = f"{tenant}.{k}"
            held = self.slots.setdefault(slot_id, {"holder": None, "free_at": EPOCH})
            if held["holder"] is not None:
                continue
            if held["free_at"] > now:
                resting.append(held["free_at"])
                continue
            free_at = now + timedelta(seconds=cooldown_s)
            self.slots[slot_id] = {"holder": holder, "free_at": free_at}
            self.slot_writes += 1
            return SlotGrant(slot_id)
        return SlotGrant(None, min(resting, default=None))

    def release_slot(self, slot: str, *, holder: str) -> bool:
        held = self.slots.get(slot)
        if held is None or held["holder"] != holder:
            return False
        self.slots[slot] = {**held, "holder": None}
        self.slot_writes += 1
        return True

    def hand_over_slot(
        self, slot: str, *, holder: str, to: str, now: datetime, cooldown_s: float
    ) -> bool:
        held = self.slots.get(slot)
        if held is None or held["holder"] != holder or held["free_at"] > now:
            return False
        self.slots[slot] = {"holder": to, "free_at": now + timedelta(seconds=cooldown_s)}
        self.slot_writes += 1
        return True

    def waiting(self, tenant: str | None = None, *, limit: int = 10) -> list[FlowRecord]:
        found = [
            r
            for r in self._records()
            if r.admission == "waiting"
            and r.status is Status.PENDING
            and tenant in (None, r.tenant)
        ]
        return sorted(found, key=lambda r: (r.queued_at or EPOCH, r.flow_id))[:limit]

    def count_waiting(self, tenant: str) -> int:
        return len(self.waiting(tenant, limit=len(self._records()) + 1))

    def tenant_state(self, tenant: str) -> TenantState:
        return self.tenants.get(tenant, TenantState(tenant))

    def set_tenant_state(self, state: TenantState) -> None:
        self.tenants[state.tenant] = state

    def tenant_states(self) -> list[TenantState]:
        return sorted(self.tenants.values(), key=lambda t: t.tenant)

    def reject(self, doc_id: str, record: dict[str, Any]) -> None:
        self.rejected[doc_id] = dict(record)

    def flows(
        self, filter: FlowFilter, *, after: Cursor | None = None, limit: int = 50
    ) -> Page[FlowRecord]:
        # Firestore's order: updated_at, then id, both descending; a page starts after ``after``.
        chosen = sorted(
            (r for r in self._records() if filter.matches(r)),
            key=lambda r: (r.updated_at, r.flow_id),
            reverse=True,
        )
        if after is not None:
            chosen = [r for r in chosen if (r.updated_at, r.flow_id) < (after.at, after.id)]
        return paged(chosen[: limit + 1], limit, record_cursor)

    def summaries(
        self, filter: FlowFilter, *, after: Cursor | None = None, limit: int = 50
    ) -> Page[FlowSummary]:
        page = self.flows(filter, after=after, limit=limit)
        return Page([FlowSummary.from_record(r) for r in page.items], page.next)

    def count_by_status(self, filter: FlowFilter) -> dict[Status, int]:
        admitted = filter.without_status()
        counts = dict.fromkeys(Status, 0)
        for record in self._records():
            if admitted.matches(record):
                counts[record.status] += 1
        return counts

    def rejected_messages(
        self, *, after: Cursor | None = None, limit: int = 50
    ) -> Page[RejectedMessage]:
        found = sorted(
            (RejectedMessage.from_doc(doc_id, doc) for doc_id, doc in self.rejected.items()),
            key=lambda m: (m.rejected_at, m.id),
            reverse=True,
        )
        if after is not None:
            found = [m for m in found if (m.rejected_at, m.id) < (after.at, after.id)]
        return paged(found[: limit + 1], limit, RejectedMessage.cursor)

    def _records(self) -> list[FlowRecord]:
        return [r for r in self._parsed() if isinstance(r, FlowRecord)]

    def _parsed(self) -> list[FlowRecord | Unreadable]:
        parsed: list[FlowRecord | Unreadable] = []
        for flow_id, doc in self.docs.items():
            try:
                parsed.append(FlowRecord.from_doc(doc))
            except ValidationError as exc:
                parsed.append(Unreadable(flow_id, f"no longer parses: {exc.error_count()} errors"))
        return parsed

    def _write(self, record: FlowRecord) -> None:
        if self.failing_writes:
            self.failing_writes -= 1
            raise ConnectionError("firestore unavailable")
        doc = record.to_doc()
        refused = self.refuse(doc)
        if refused:
            raise UnstorableChange(refused)
        self.writes += 1
        self.docs[record.key] = doc
        self.versions[record.key] = self._version(record.key) + timedelta(microseconds=1)

    def _version(self, flow_id: str) -> datetime:
        return self.versions.get(flow_id, EPOCH)


def _due(cutoff: datetime) -> Any:
    def key(found: FlowRecord | Unreadable) -> datetime:
        return found.next_run_at or cutoff if isinstance(found, FlowRecord) else cutoff

    return key


class MemoryBreakers:
    """Breakers and their sharded window counts in dicts, in their stored form."""

    def __init__(self) -> None:
        self.docs: dict[str, dict[str, Any]] = {}
        self.versions: dict[str, int] = {}
        self.windows: dict[tuple[str, int], dict[int, dict[str, int]]] = {}
        self.writes = 0

    def breaker(self, dependency: str) -> tuple[BreakerState, object | None]:
        return state_from_doc(dependency, self.docs.get(dependency)), self.versions.get(dependency)

    def put_breaker(
        self, state: BreakerState, *, version: object | None
    ) -> tuple[bool, object | None]:
        if self.versions.get(state.dependency) != version:
            return False, None
        self.writes += 1
        self.docs[state.dependency] = state_doc(state)
        self.versions[state.dependency] = self.versions.get(state.dependency, 0) + 1
        return True, self.versions[state.dependency]

    def add_counts(
        self, dependency: str, shard: int, counts: Mapping[int, Counts], *, drop: Iterable[int]
    ) -> None:
        self.writes += 1
        window = self.windows.setdefault((dependency, shard), {})
        for bucket, added in counts.items():
            doc = window.setdefault(bucket, {})
            for name, n in added.to_doc().items():
                doc[name] = doc.get(name, 0) + n
        for bucket in drop:
            window.pop(bucket, None)

    def counts(self, dependency: str, shards: int) -> dict[int, Counts]:
        total: dict[int, Counts] = {}
        for shard in range(shards):
            for bucket, doc in self.windows.get((dependency, shard), {}).items():
                total.setdefault(bucket, Counts()).add(Counts.from_doc(doc))
        return total

    def breakers(self) -> list[BreakerState]:
        return [state_from_doc(name, doc) for name, doc in sorted(self.docs.items())]


@dataclass
class QueuedTask:
    """A task waiting in a MemoryQueue."""

    flow_id: str
    next: NextTask
    seq: int = 0

    def payload(self) -> TaskPayload:
        return TaskPayload(flow_id=self.flow_id, position=self.next.position)


class MemoryQueue:
    """Tasks by name; a name that was ever created stays taken, as in Cloud Tasks."""

    def __init__(self) -> None:
        self.tasks: dict[str, QueuedTask] = {}
        self.spent: set[str] = set()
        self.ensured: list[tuple[str, NextTask, Enqueued]] = []
        self._seq = 0

    def ensure(self, flow_id: str, nxt: NextTask) -> Enqueued:
        if nxt.task_id in self.spent:
            outcome = Enqueued.ALREADY_ENQUEUED
        else:
            self._seq += 1
            self.spent.add(nxt.task_id)
            self.tasks[nxt.task_id] = QueuedTask(flow_id, nxt, self._seq)
            outcome = Enqueued.CREATED
        self.ensured.append((flow_id, nxt, outcome))
        return outcome

    def exists(self, nxt: NextTask) -> bool:
        return nxt.task_id in self.tasks

    def run_now(self, nxt: NextTask) -> bool:
        """Due at once (the next ``due_first``), as RunTask dispatches it."""
        queued = self.tasks.get(nxt.task_id)
        if queued is None:
            return False
        self.tasks[nxt.task_id] = replace(
            queued, next=queued.next.model_copy(update={"run_at": EPOCH})
        )
        return True

    def lose(self, task_id: str) -> None:
        """The task vanishes (deleted by hand, purged, or never created): its name stays spent."""
        del self.tasks[task_id]

    def take(self, task_id: str) -> TaskPayload:
        """Dispatch one task: it leaves the queue and its payload is what the handler gets."""
        return self.tasks.pop(task_id).payload()

    def due_first(self, flow_id: str | None = None) -> QueuedTask | None:
        """The task due soonest (of ``flow_id``), oldest first among equals; None if none."""
        waiting = [t for t in self.tasks.values() if flow_id in (None, t.flow_id)]
        return min(waiting, key=lambda t: (t.next.run_at, t.seq), default=None)

    def only(self, flow_id: str | None = None) -> QueuedTask:
        """The single queued task (of ``flow_id``); fails unless there is exactly one."""
        (task,) = [t for t in self.tasks.values() if flow_id in (None, t.flow_id)]
        return task


class MemoryEvents:
    """Result events, in the order they were published."""

    def __init__(self) -> None:
        self.published: list[dict[str, Any]] = []
        self.failures_left = 0  # how many publishes fail before they succeed again

    def publish_result(self, record: FlowRecord) -> str:
        if self.failures_left:
            self.failures_left -= 1
            raise ConnectionError("pubsub unavailable")
        self.published.append(result_event(record))
        return str(len(self.published))

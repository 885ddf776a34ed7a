"""In-memory stand-ins for the engine's ports (FlowStore, TaskQueue, Events) and step handlers.

They implement only the methods Engine calls, keep what they were asked in plain lists and dicts
a test can read, and model the two behaviours the engine relies on: a flow document is written
whole inside ``change`` (a round trip through its Firestore form), and a task name, once used,
is never accepted again (Cloud Tasks answers ALREADY_EXISTS for it).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from opentelemetry.trace import Tracer

from relayflow.core import planner
from relayflow.core.clock import FakeClock
from relayflow.core.engine import Engine
from relayflow.core.flows import Flow, Registry, StepContext
from relayflow.core.planner import QueueNames
from relayflow.core.position import TaskPayload
from relayflow.core.records import FlowRecord, NextTask
from relayflow.core.state import ACTIVE
from relayflow.gcp.events import result_event
from relayflow.gcp.queue import Enqueued
from relayflow.gcp.store import Snapshot

EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


class FakeStore:
    """Flow documents and rejected-message records in dicts, changed whole like a transaction."""

    def __init__(self) -> None:
        self.docs: dict[str, dict[str, Any]] = {}
        self.rejected: dict[str, dict[str, Any]] = {}
        self.versions: dict[str, datetime] = {}

    def create(self, record: FlowRecord) -> bool:
        if record.flow_id in self.docs:
            return False
        self.docs[record.flow_id] = record.to_doc()
        return True

    def read(self, flow_id: str) -> Snapshot | None:
        doc = self.docs.get(flow_id)
        if doc is None:
            return None
        return Snapshot(FlowRecord.from_doc(doc), self._version(flow_id))

    def get(self, flow_id: str) -> FlowRecord | None:
        found = self.read(flow_id)
        return None if found is None else found.record

    def change(
        self,
        flow_id: str,
        change: Callable[[FlowRecord], FlowRecord | None],
        *,
        start: Snapshot | None = None,
    ) -> FlowRecord | None:
        written = self.change_versioned(flow_id, change, start=start)
        return written.record if written else None

    def change_versioned(
        self,
        flow_id: str,
        change: Callable[[FlowRecord], FlowRecord | None],
        *,
        start: Snapshot | None = None,
    ) -> Snapshot | None:
        # Like the conditional write: a snapshot that is no longer current is read afresh.
        stale = start is None or start.version != self._version(flow_id)
        current = self.read(flow_id) if stale else start
        if current is None:
            return None
        updated = change(current.record)
        if updated is None:
            return None
        self.docs[flow_id] = updated.to_doc()
        self.versions[flow_id] = self._version(flow_id) + timedelta(microseconds=1)
        return Snapshot(updated, self.versions[flow_id])

    def _version(self, flow_id: str) -> datetime:
        return self.versions.get(flow_id, EPOCH)

    def mark_published(
        self, flow_id: str, generation: int, *, start: Snapshot | None = None
    ) -> bool:
        mark = functools.partial(planner.published, generation=generation)
        return self.change(flow_id, mark, start=start) is not None

    def unpublished(self, *, cutoff: datetime, limit: int = 100) -> list[FlowRecord]:
        records = [FlowRecord.from_doc(doc) for doc in self.docs.values()]
        return [
            r
            for r in records
            if not r.result_published and r.finished_at is not None and r.finished_at < cutoff
        ][:limit]

    def reject(self, doc_id: str, record: dict[str, Any]) -> None:
        self.rejected[doc_id] = dict(record)

    def overdue(self, *, cutoff: datetime, limit: int = 100) -> list[FlowRecord]:
        records = [FlowRecord.from_doc(doc) for doc in self.docs.values()]
        return [
            r
            for r in records
            if r.status in ACTIVE and r.next_run_at is not None and r.next_run_at < cutoff
        ][:limit]


@dataclass
class QueuedTask:
    flow_id: str
    next: NextTask

    def payload(self) -> TaskPayload:
        return TaskPayload(flow_id=self.flow_id, position=self.next.position)


class FakeQueue:
    """Tasks by name; a name that was ever created stays taken, as in Cloud Tasks."""

    def __init__(self) -> None:
        self.tasks: dict[str, QueuedTask] = {}
        self.spent: set[str] = set()
        self.ensured: list[tuple[str, NextTask, Enqueued]] = []

    def ensure(self, flow_id: str, nxt: NextTask) -> Enqueued:
        if nxt.task_id in self.spent:
            outcome = Enqueued.ALREADY_ENQUEUED
        else:
            self.spent.add(nxt.task_id)
            self.tasks[nxt.task_id] = QueuedTask(flow_id, nxt)
            outcome = Enqueued.CREATED
        self.ensured.append((flow_id, nxt, outcome))
        return outcome

    def exists(self, nxt: NextTask) -> bool:
        return nxt.task_id in self.tasks

    def lose(self, task_id: str) -> None:
        """The task vanishes (deleted by hand, purged, or never created): its name stays spent."""
        del self.tasks[task_id]

    def take(self, task_id: str) -> TaskPayload:
        """Dispatch one task: it leaves the queue and its payload is what the handler gets."""
        return self.tasks.pop(task_id).payload()

    def only(self, flow_id: str | None = None) -> QueuedTask:
        """The single queued task (of ``flow_id``); fails the test unless there is exactly one."""
        (task,) = [t for t in self.tasks.values() if flow_id in (None, t.flow_id)]
        return task


class FakeEvents:
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


Scripted = dict[str, Any] | Exception | Callable[[StepContext], dict[str, Any]]


@dataclass
class ScriptedHandler:
    """A step handler that plays a script, one entry per call, repeating the last entry.

    An entry is returned if it is a dict, raised if it is an exception, called if it is a
    function. Every context the handler was called with is kept in ``calls``.
    """

    script: list[Scripted]
    calls: list[StepContext] = field(default_factory=list)

    def __call__(self, ctx: StepContext) -> dict[str, Any]:
        self.calls.append(ctx)
        entry = self.script[min(len(self.calls), len(self.script)) - 1]
        if isinstance(entry, Exception):
            raise entry
        if callable(entry):
            return entry(ctx)
        return entry


def engine_over(
    flow: Flow,
    *,
    store: FakeStore,
    queue: FakeQueue,
    events: FakeEvents,
    clock: FakeClock,
    tracer: Tracer | None = None,
) -> Engine:
    """An Engine running ``flow`` over the fakes (queues named q-steps and q-polls)."""
    return Engine(
        registry=Registry((flow,)),
        store=store,  # type: ignore[arg-type]
        queue=queue,  # type: ignore[arg-type]
        events=events,  # type: ignore[arg-type]
        clock=clock,
        queues=QueueNames(steps="q-steps", polls="q-polls"),
        tracer=tracer,
    )

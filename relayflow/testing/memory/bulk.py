"""Bulk actions' documents and rows in dicts (``core.bulk_state.BulkStore``), changed by
compare-and-set on a version number as Firestore's are on their update time; and their batch
tasks by name (``core.bulk_state.BulkQueue``), a name once used never accepted again."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from relayflow.core.bulk import BulkTask
from relayflow.core.bulk_state import BulkAction, BulkRow, BulkState
from relayflow.core.ports import Enqueued


class MemoryBulkStore:
    """Bulk documents and their chunks of rows, each with its version; ``writes`` counts the
    bulk documents' writes that landed (a test checks one per batch)."""

    def __init__(self) -> None:
        self.actions: dict[str, BulkAction] = {}
        self.chunks: dict[tuple[str, int], tuple[list[BulkRow], int]] = {}
        self.writes = 0
        self.row_writes = 0
        self.conflicts = 0
        self.rows_expire_at: datetime | None = None
        self._versions = 0

    def create(
        self, action: BulkAction, chunks: Sequence[Sequence[BulkRow]], *, rows_expire_at: datetime
    ) -> None:
        self.rows_expire_at = rows_expire_at
        for n, rows in enumerate(chunks):
            self.chunks[(action.id, n)] = (_copied(rows), self._next())
        self.actions[action.id] = action.model_copy(update={"version": self._next()})

    def read(self, bulk_id: str) -> BulkAction | None:
        found = self.actions.get(bulk_id)
        return found.model_copy(deep=True) if found is not None else None

    def write(self, action: BulkAction) -> bool:
        current = self.actions.get(action.id)
        if current is None or current.version != action.version:
            self.conflicts += 1
            return False
        self.writes += 1
        self.actions[action.id] = action.model_copy(update={"version": self._next()}, deep=True)
        return True

    def recent(self, *, limit: int = 50) -> list[BulkAction]:
        newest = sorted(self.actions.values(), key=lambda a: (a.created_at, a.id), reverse=True)
        return [a.model_copy(deep=True) for a in newest[:limit]]

    def running(self, *, limit: int = 100) -> list[BulkAction]:
        return [a for a in self.recent(limit=10_000) if a.state is BulkState.RUNNING][:limit]

    def rows(self, bulk_id: str, chunk: int) -> tuple[list[BulkRow], Any]:
        rows, version = self.chunks.get((bulk_id, chunk), ([], None))
        return _copied(rows), version

    def write_rows(self, bulk_id: str, chunk: int, rows: Sequence[BulkRow], version: Any) -> bool:
        current = self.chunks.get((bulk_id, chunk))
        if current is None or current[1] != version:
            self.conflicts += 1
            return False
        self.row_writes += 1
        self.chunks[(bulk_id, chunk)] = (_copied(rows), self._next())
        return True

    def _next(self) -> int:
        self._versions += 1
        return self._versions


@dataclass
class QueuedBatch:
    """A batch task waiting in a MemoryBulkQueue."""

    task: BulkTask
    run_at: datetime
    seq: int


class MemoryBulkQueue:
    """Batch tasks by name; a name that was ever created stays taken, as in Cloud Tasks."""

    def __init__(self) -> None:
        self.tasks: dict[str, QueuedBatch] = {}
        self.spent: set[str] = set()
        self.created: list[BulkTask] = []
        self._seq = 0

    def ensure_batch(self, task: BulkTask, run_at: datetime) -> Enqueued:
        name = task.task_id()
        if name in self.spent:
            return Enqueued.ALREADY_ENQUEUED
        self._seq += 1
        self.spent.add(name)
        self.tasks[name] = QueuedBatch(task, run_at, self._seq)
        self.created.append(task)
        return Enqueued.CREATED

    def due_first(self) -> QueuedBatch | None:
        return min(self.tasks.values(), key=lambda t: (t.run_at, t.seq), default=None)

    def take(self, task: BulkTask) -> BulkTask:
        """Dispatch one task: it leaves the queue."""
        return self.tasks.pop(task.task_id()).task


def _copied(rows: Sequence[BulkRow]) -> list[BulkRow]:
    return [row.model_copy(deep=True) for row in rows]

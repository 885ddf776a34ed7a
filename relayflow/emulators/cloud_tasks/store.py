"""Durability: queues, tasks and tombstones written through to SQLite when --data-dir is set."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from relayflow.emulators.cloud_tasks.codec import task_from_pb, task_to_pb
from relayflow.emulators.cloud_tasks.model import Task
from relayflow.emulators.cloud_tasks.protos import VIEW_FULL, Proto, QueuePb, TaskPb

_SCHEMA = """
CREATE TABLE IF NOT EXISTS queues (name TEXT PRIMARY KEY, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS tasks (
    name TEXT PRIMARY KEY,
    queue TEXT NOT NULL,
    data BLOB NOT NULL,
    execution_count INTEGER NOT NULL,
    previous_response INTEGER NOT NULL,
    retry_reason TEXT NOT NULL,
    named INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS tasks_by_queue ON tasks (queue);
CREATE TABLE IF NOT EXISTS tombstones (name TEXT PRIMARY KEY, expires_us INTEGER NOT NULL);
"""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything a restarted emulator reloads."""

    queues: list[Proto]
    tasks: list[Task]
    tombstones: list[tuple[str, int]]


class Store(Protocol):
    """Where state changes go as they happen."""

    def put_queue(self, queue: Proto) -> None: ...
    def delete_queue(self, name: str) -> None: ...
    def put_task(self, task: Task) -> None: ...
    def delete_task(self, name: str) -> None: ...
    def put_tombstone(self, name: str, expires_us: int) -> None: ...
    def prune_tombstones(self, now_us: int) -> None: ...
    def load(self) -> Snapshot: ...
    def close(self) -> None: ...


class MemoryStore:
    """No durability: the default without --data-dir."""

    def put_queue(self, queue: Proto) -> None:
        pass

    def delete_queue(self, name: str) -> None:
        pass

    def put_task(self, task: Task) -> None:
        pass

    def delete_task(self, name: str) -> None:
        pass

    def put_tombstone(self, name: str, expires_us: int) -> None:
        pass

    def prune_tombstones(self, now_us: int) -> None:
        pass

    def load(self) -> Snapshot:
        return Snapshot(queues=[], tasks=[], tombstones=[])

    def close(self) -> None:
        pass


class SqliteStore:
    """Write-through SQLite (WAL): each change is committed before the API call returns."""

    def __init__(self, data_dir: Path) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        # Autocommit: every statement is its own transaction.
        self._db = sqlite3.connect(data_dir / "cloud_tasks.sqlite3", isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        # NORMAL survives a process crash (not a power cut) and keeps commits cheap.
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)

    def put_queue(self, queue: Proto) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO queues VALUES (?, ?)", (queue.name, queue.SerializeToString())
        )

    def delete_queue(self, name: str) -> None:
        self._db.execute("BEGIN")
        self._db.execute("DELETE FROM queues WHERE name = ?", (name,))
        self._db.execute("DELETE FROM tasks WHERE queue = ?", (name,))
        self._db.execute("COMMIT")

    def put_task(self, task: Task) -> None:
        data = task_to_pb(task, view=VIEW_FULL).SerializeToString()
        self._db.execute(
            "INSERT OR REPLACE INTO tasks VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                task.name,
                task.queue_name,
                data,
                task.execution_count,
                task.previous_response,
                task.retry_reason,
                int(task.named),
            ),
        )

    def delete_task(self, name: str) -> None:
        self._db.execute("DELETE FROM tasks WHERE name = ?", (name,))

    def put_tombstone(self, name: str, expires_us: int) -> None:
        self._db.execute("INSERT OR REPLACE INTO tombstones VALUES (?, ?)", (name, expires_us))

    def prune_tombstones(self, now_us: int) -> None:
        self._db.execute("DELETE FROM tombstones WHERE expires_us <= ?", (now_us,))

    def load(self) -> Snapshot:
        queues = [QueuePb.FromString(row[0]) for row in self._db.execute("SELECT data FROM queues")]
        tombstones = [
            (str(name), int(expires))
            for name, expires in self._db.execute(
                "SELECT name, expires_us FROM tombstones ORDER BY expires_us"
            )
        ]
        return Snapshot(queues=queues, tasks=list(self._tasks()), tombstones=tombstones)

    def _tasks(self) -> Iterator[Task]:
        rows = self._db.execute(
            "SELECT queue, data, execution_count, previous_response, retry_reason, named FROM tasks"
        )
        for queue, data, execution_count, previous_response, retry_reason, named in rows:
            task = task_from_pb(TaskPb.FromString(data), queue_name=queue)
            task.execution_count = execution_count
            task.previous_response = previous_response
            task.retry_reason = retry_reason
            task.named = bool(named)
            yield task

    def close(self) -> None:
        self._db.close()

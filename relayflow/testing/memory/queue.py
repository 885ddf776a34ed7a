"""Tasks by name in a dict (``core.ports.Queue``; the Cloud Tasks one is ``gcp.queue``): a
name once used is never accepted again, as Cloud Tasks answers ALREADY_EXISTS for it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from relayflow.core.ports import Enqueued
from relayflow.core.position import PollNote, TaskPayload
from relayflow.core.records import NextTask
from relayflow.testing.memory.base import EPOCH


@dataclass
class QueuedTask:
    """A task waiting in a MemoryQueue."""

    flow_id: str
    next: NextTask
    seq: int = 0
    chain: tuple[PollNote, ...] = ()  # a poll chain's task: the polls it carries

    def payload(self) -> TaskPayload:
        return TaskPayload(flow_id=self.flow_id, position=self.next.position, chain=self.chain)


class MemoryQueue:
    """Tasks by name; a name that was ever created stays taken, as in Cloud Tasks."""

    def __init__(self) -> None:
        self.tasks: dict[str, QueuedTask] = {}
        self.spent: set[str] = set()
        self.ensured: list[tuple[str, NextTask, Enqueued]] = []
        self._seq = 0

    def ensure(self, flow_id: str, nxt: NextTask, chain: Sequence[PollNote] = ()) -> Enqueued:
        if nxt.task_id in self.spent:
            outcome = Enqueued.ALREADY_ENQUEUED
        else:
            self._seq += 1
            self.spent.add(nxt.task_id)
            self.tasks[nxt.task_id] = QueuedTask(flow_id, nxt, self._seq, tuple(chain))
            outcome = Enqueued.CREATED
        self.ensured.append((flow_id, nxt, outcome))
        return outcome

    def exists(self, nxt: NextTask) -> bool:
        return nxt.task_id in self.tasks

    def pending(self, flow_id: str, tasks: Sequence[NextTask]) -> TaskPayload | None:
        found = [self.tasks[t.task_id] for t in tasks if t.task_id in self.tasks]
        return found[-1].payload() if found else None

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

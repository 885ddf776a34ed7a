"""The tasks this process put off for each dependency while its breaker was open, remembered so
that when the breaker closes they can be brought forward without querying the store.

Each instance remembers its own: the one that closes the breaker brings its own forward at
once, every other one when it next reads the breaker and sees it closed (within the breakers'
refresh, about a second). A step put off by an instance that has gone since comes back at its
own next try, as it would with no breaker: the memory only makes recovery sooner, and nothing
else rests on it.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta

from relayflow.core.records import NextTask

# Remembered per dependency, newest kept (a few megabytes at most): more than the longest a
# step is put off (max_defer_s, 30 s by default) at a hundred put-offs a second.
REMEMBERED = 5000
# A closing brings forward at most this many (newest first): two seconds of a queue's
# dispatch rate (200 a second); the rest come back at their own next try.
BRING_FORWARD_LIMIT = 400
# Put off earlier than the breaker's last opening, a task still comes forward if it is due
# more than this long from now (a slow poller need not wait for a dependency that is back).
BRING_FORWARD_AFTER_S = 10.0
# Due within this long, a task comes anyway: running it now would gain nothing.
DUE_SOON_S = 1.0


@dataclass(frozen=True)
class PutOff:
    at: datetime  # when it was put off
    task: NextTask


class PutOffs:
    """Per dependency, the newest ``limit`` tasks this process put off (thread-safe)."""

    def __init__(self, limit: int = REMEMBERED) -> None:
        self._limit = limit
        self._by_dependency: dict[str, deque[PutOff]] = {}
        self._lock = threading.Lock()

    def add(self, dependency: str, task: NextTask, at: datetime) -> None:
        with self._lock:
            found = self._by_dependency.get(dependency)
            if found is None:
                found = self._by_dependency[dependency] = deque(maxlen=self._limit)
            found.append(PutOff(at, task))

    def take(self, dependency: str, *, since: datetime | None, now: datetime) -> list[NextTask]:
        """Forget what was put off for ``dependency``; return what to bring forward now that
        its breaker closed, newest first:

        - put off since the breaker last opened (``since``): the probe that opened it was the
          last sign of the outage, so the dependency may have been back for each of them;
        - put off earlier but due more than ``BRING_FORWARD_AFTER_S`` from now.

        Those put off earlier and due sooner come back when they would have tried without a
        breaker, as they would have failed then. None due within ``DUE_SOON_S``."""
        with self._lock:
            found = self._by_dependency.pop(dependency, deque())
        soon = now + timedelta(seconds=DUE_SOON_S)
        later = now + timedelta(seconds=BRING_FORWARD_AFTER_S)
        chosen: dict[str, NextTask] = {}
        for put_off in reversed(found):  # newest first
            task = put_off.task
            recent = since is not None and put_off.at >= since
            if task.run_at > soon and (recent or task.run_at > later):
                chosen.setdefault(task.task_id, task)
            if len(chosen) >= BRING_FORWARD_LIMIT:
                break
        return list(chosen.values())

    def __len__(self) -> int:
        with self._lock:
            return sum(len(found) for found in self._by_dependency.values())

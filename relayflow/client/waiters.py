"""The waiter table: the handles waiting for flows to end, matched in memory to result events.

One table per results subscription (one per process, shared by its clients): every handle
whose ``result()`` waits registers here under its flow's ``(tenant, flow_id)`` and the oldest
generation it accepts, and each event from ``flow-results`` resolves at most the waiters of
its flow. Pure logic, no I/O: the subscription (``relayflow.client.results``) feeds it events
and the client feeds it the one read of a flow that recovers an event the subscription missed.

Delivery is at least once and unordered, so:

- a repeat (the same event again, or the ``cleanup`` event after the ``result`` one) finds the
  waiter resolved already, or gone, and changes nothing;
- an event for a generation older than the one waited for (a flow an operator retried, whose
  earlier run's event arrives late) is ignored;
- an event no one waits for (another process's flow, a waiter that timed out) is dropped.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from relayflow.core.state import TERMINAL, Status

WaitKey = tuple[str, str]  # (tenant, flow_id): flow ids are each tenant's own


@dataclass(frozen=True)
class FlowResult:
    """How a flow ended: the ``result`` of its document, or of its result event."""

    flow_id: str
    tenant: str
    generation: int
    status: Status
    code: str
    message: str
    data: dict[str, Any] | None = None
    error: dict[str, Any] | None = None

    @property
    def succeeded(self) -> bool:
        return self.status is Status.SUCCEEDED

    @classmethod
    def from_event(cls, event: Mapping[str, Any]) -> FlowResult:
        """From a ``flow-results`` event body (or any mapping with its fields)."""
        return cls(
            flow_id=str(event["flow_id"]),
            tenant=str(event.get("tenant") or "default"),
            generation=int(event.get("generation") or 0),
            status=Status(str(event["status"])),
            code=str(event.get("code") or ""),
            message=str(event.get("message") or ""),
            data=event.get("data"),
            error=event.get("error"),
        )

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> FlowResult | None:
        """From a flow's document as the api shows it: None while it has not ended."""
        result = doc.get("result")
        if doc.get("status") not in TERMINAL or not isinstance(result, Mapping):
            return None
        position = doc.get("position") or {}
        return cls.from_event(
            {
                **result,
                "flow_id": doc["flow_id"],
                "tenant": doc.get("tenant"),
                "generation": position.get("generation", 0),
            }
        )


@dataclass
class _Entry:
    """The waiters of one flow: one future all of them share, the oldest generation any of
    them accepts, and how many wait (the entry goes when the last one stops)."""

    future: Future[FlowResult] = field(default_factory=Future)
    min_generation: int = 0
    count: int = 0


class Waiters:
    """The table. Thread-safe: the subscription's callbacks and the callers' threads use it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[WaitKey, _Entry] = {}
        self.ignored_stale = 0  # events for a generation older than waited for
        self.ignored_unwanted = 0  # events no one here waits for (or repeats after the end)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def wants(self, key: WaitKey) -> bool:
        """Whether anyone waits for this flow (checked before parsing an event's body)."""
        with self._lock:
            return key in self._entries

    def keys(self) -> list[WaitKey]:
        """Every flow waited for: what a restarted subscription reads once to recover."""
        with self._lock:
            return list(self._entries)

    @contextmanager
    def waiting(self, key: WaitKey, min_generation: int = 0) -> Iterator[Future[FlowResult]]:
        """Wait for ``key`` to end in ``min_generation`` or later, for the ``with`` block: the
        future resolves with the first such result; leaving the block stops this wait."""
        future = self.register(key, min_generation)
        try:
            yield future
        finally:
            self.release(key)

    def register(self, key: WaitKey, min_generation: int = 0) -> Future[FlowResult]:
        """Start waiting (pair with ``release``). A second waiter of the same flow shares the
        first one's future; a waiter for a newer generation than a resolved entry's result
        gets a fresh one."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = _Entry(min_generation=min_generation)
            elif entry.future.done() and entry.future.result().generation < min_generation:
                entry.future = Future()
                entry.min_generation = min_generation
            else:
                entry.min_generation = min(entry.min_generation, min_generation)
            entry.count += 1
            return entry.future

    def release(self, key: WaitKey) -> None:
        """Stop one wait; the flow's entry goes with its last waiter (a late event for it is
        then dropped, as one for a flow never waited for)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return
            entry.count -= 1
            if entry.count <= 0:
                del self._entries[key]

    def deliver(self, result: FlowResult) -> bool:
        """Resolve the waiters of ``result``'s flow; True if this resolved any (False for a
        repeat, a stale generation or a flow no one waits for)."""
        with self._lock:
            entry = self._entries.get((result.tenant, result.flow_id))
            if entry is None or entry.future.done():
                self.ignored_unwanted += 1
                return False
            if result.generation < entry.min_generation:
                self.ignored_stale += 1
                return False
            # Resolved under the lock: two deliveries racing cannot both set it. The future's
            # callbacks (an asyncio waiter's wake-up) only schedule work, so this is brief.
            entry.future.set_result(result)
            return True

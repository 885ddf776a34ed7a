"""The waiter table: the handles waiting for flows to end, matched in memory to result events.

One table per results subscription (one per client): every handle whose ``result()`` waits
registers here under its flow's ``(tenant, flow_id)`` and the oldest generation it accepts,
and each event from ``flow-results`` resolves at most the waiters of its flow. A flow the
client starts while its subscription runs is *expected* before its start message goes out, so
its event is kept even when it arrives before anyone waits; the newest ``max_expected``
expectations no one has waited on yet are kept (about 1 KiB each, more with large outputs),
and a wait on one dropped before reads its flow instead.

Pure logic, no I/O: the subscription (``relayflow.client.results``) feeds it events
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
from collections import OrderedDict
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
    # Which flow and version ran ("" and 0 if what it was read from did not say): which
    # output model, if any, its data is an instance of.
    flow: str = ""
    version: int = 0

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
            flow=str(event.get("flow") or ""),
            version=int(event.get("version") or 0),
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
                "flow": doc.get("flow"),
                "version": doc.get("version"),
            }
        )


@dataclass
class _Entry:
    """The waiters of one flow: one future all of them share, the oldest generation any of
    them accepts, and how many wait (the entry goes when the last one stops)."""

    future: Future[FlowResult] = field(default_factory=Future)
    min_generation: int = 0
    count: int = 0


MAX_EXPECTED = 20_000


class Waiters:
    """The table. Thread-safe: the subscription's callbacks and the callers' threads use it."""

    def __init__(self, *, max_expected: int = MAX_EXPECTED) -> None:
        self._lock = threading.Lock()
        self._entries: dict[WaitKey, _Entry] = {}
        self._expected: OrderedDict[WaitKey, None] = OrderedDict()  # oldest first
        self._max_expected = max_expected
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
        future, _ = self.register(key, min_generation)
        try:
            yield future
        finally:
            self.release(key)

    def expect(self, key: WaitKey, min_generation: int = 0) -> None:
        """Keep ``key``'s end when it comes, though no one waits yet (a flow just started);
        the oldest expectation beyond ``max_expected`` that no one waits on goes."""
        with self._lock:
            self._entry(key, min_generation)
            self._expected[key] = None
            self._expected.move_to_end(key)
            while len(self._expected) > self._max_expected:
                old, _ = self._expected.popitem(last=False)
                entry = self._entries.get(old)
                if entry is not None and entry.count == 0:
                    del self._entries[old]

    def register(self, key: WaitKey, min_generation: int = 0) -> tuple[Future[FlowResult], bool]:
        """Start waiting (pair with ``release``): the future, and whether the flow was waited
        for or expected already (else its end may have come and gone: read it). A second
        waiter of the same flow shares the first one's future."""
        with self._lock:
            known = key in self._entries
            entry = self._entry(key, min_generation)
            entry.count += 1
            return entry.future, known

    def narrow(self, key: WaitKey, min_generation: int) -> None:
        """Wait for ``min_generation`` or later only (a handle learned its flow's run)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and not entry.future.done():
                entry.min_generation = max(entry.min_generation, min_generation)

    def release(self, key: WaitKey) -> None:
        """Stop one wait; the flow's entry (and its expectation) goes with its last waiter
        (a late event for it is then dropped, as one for a flow never waited for)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return
            entry.count -= 1
            if entry.count <= 0:
                del self._entries[key]
                self._expected.pop(key, None)

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

    def _entry(self, key: WaitKey, min_generation: int) -> _Entry:
        """The flow's entry (made if missing). One resolved with an older generation's end
        than ``min_generation`` starts over: a retried flow's new run is waited for."""
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry(min_generation=min_generation)
        elif entry.future.done() and entry.future.result().generation < min_generation:
            entry.future = Future()
            entry.min_generation = min_generation
        elif not entry.future.done():
            entry.min_generation = min(entry.min_generation, min_generation)
        return entry

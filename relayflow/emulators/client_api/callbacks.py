"""Activation callbacks: the outbox of due deliveries and the thread that POSTs them.

The state puts a delivery in the outbox when a registration is created with a ``callback_url``
(its due time follows from the activation time and the callback mode), with the registration's
``callback_token`` in the ``X-Relayflow-Callback-Token`` header: the caller's secret travels
apart from the URL, as a real API sends a webhook's secret, so no access log holds it.
``tick(now)`` sends every delivery due by ``now`` and retries a failed one a few times with
backoff; the background thread only calls ``tick`` with the clock's time, so tests drive
delivery by calling ``tick`` themselves, with a fake clock and a fake ``post``, and never sleep.
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

log = logging.getLogger(__name__)

# url, JSON body, headers, timeout (s) -> HTTP status; raises (OSError ...) when no answer came.
Post = Callable[[str, dict[str, Any], dict[str, str], float], int]
Clock = Callable[[], float]

MAX_TRIES = 4
FIRST_BACKOFF_S = 0.5  # then 1 s, 2 s: a delivery is given up about 3.5 s after it was due
POST_TIMEOUT_S = 5.0
TICK_INTERVAL_S = 0.05
# The header that carries a registration's callback_token (the one relayflow's api reads).
CALLBACK_TOKEN_HEADER = "X-Relayflow-Callback-Token"


@dataclass(frozen=True, order=True)
class Delivery:
    """One callback to send: ordered by due time, then by when it was queued."""

    due: float
    seq: int
    registration_id: str = field(compare=False)
    url: str = field(compare=False)
    body: dict[str, Any] = field(compare=False, hash=False)
    headers: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    tries: int = field(default=0, compare=False)


class Outbox:
    """Deliveries by due time; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._heap: list[Delivery] = []
        self._seq = itertools.count()

    def put(
        self,
        *,
        due: float,
        registration_id: str,
        url: str,
        body: dict[str, Any],
        headers: dict[str, str] | None = None,
    ) -> None:
        delivery = Delivery(due, next(self._seq), registration_id, url, body, dict(headers or {}))
        self._push(delivery)

    def retry(self, delivery: Delivery, *, due: float) -> None:
        self._push(replace(delivery, due=due, seq=next(self._seq), tries=delivery.tries + 1))

    def pop_due(self, now: float) -> list[Delivery]:
        with self._lock:
            due: list[Delivery] = []
            while self._heap and self._heap[0].due <= now:
                due.append(heapq.heappop(self._heap))
            return due

    def __len__(self) -> int:
        with self._lock:
            return len(self._heap)

    def clear(self) -> None:
        with self._lock:
            self._heap.clear()

    def _push(self, delivery: Delivery) -> None:
        with self._lock:
            heapq.heappush(self._heap, delivery)


class CallbackLedger(Protocol):
    """What the dispatcher asks of the state: is a delivery still wanted, and the counts."""

    def callback_wanted(self, registration_id: str) -> bool:
        """False when the registration is gone or was cancelled before it activated."""
        ...

    def count_callback(self, *, sent: bool) -> None:
        """One delivery done: sent (2xx), or failed for good."""
        ...


class CallbackDispatcher:
    """Sends due callbacks; ``start()`` runs ``tick`` on a daemon thread."""

    def __init__(
        self,
        *,
        outbox: Outbox,
        ledger: CallbackLedger,
        clock: Clock,
        post: Post | None = None,
        max_tries: int = MAX_TRIES,
        first_backoff_s: float = FIRST_BACKOFF_S,
    ) -> None:
        self._outbox = outbox
        self._ledger = ledger
        self._clock = clock
        self._post = post or post_json
        self._max_tries = max_tries
        self._first_backoff_s = first_backoff_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def tick(self, now: float) -> int:
        """Send every delivery due by ``now``; returns how many were attempted."""
        due = [
            d for d in self._outbox.pop_due(now) if self._ledger.callback_wanted(d.registration_id)
        ]
        for delivery in due:
            self._attempt(delivery, now)
        return len(due)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="callbacks", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.wait(TICK_INTERVAL_S):
            try:
                self.tick(self._clock())
            except Exception:  # the thread must outlive any one bad tick
                log.exception("callback tick failed")

    def _attempt(self, delivery: Delivery, now: float) -> None:
        if self._send(delivery):
            self._ledger.count_callback(sent=True)
        elif delivery.tries + 1 < self._max_tries:
            backoff_s = self._first_backoff_s * 2**delivery.tries
            self._outbox.retry(delivery, due=now + backoff_s)
        else:
            log.warning("callback to %s given up after %d tries", delivery.url, self._max_tries)
            self._ledger.count_callback(sent=False)

    def _send(self, delivery: Delivery) -> bool:
        try:
            status = self._post(delivery.url, delivery.body, delivery.headers, POST_TIMEOUT_S)
        except Exception as exc:  # no answer (refused, reset, timed out) is a failed try
            log.info("callback to %s failed: %s", delivery.url, exc)
            return False
        return 200 <= status < 300


def post_json(url: str, body: dict[str, Any], headers: dict[str, str], timeout_s: float) -> int:
    """POST ``body`` as JSON with ``headers``; the HTTP status of the answer."""
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={
            **headers,
            "Content-Type": "application/json",
            "User-Agent": "relayflow-fake-client-api",
        },
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            status: int = response.status
            return status
    except urllib.error.HTTPError as error:
        return error.code

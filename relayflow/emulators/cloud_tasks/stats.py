"""Counters and dispatch-lag percentiles for GET /stats."""

from __future__ import annotations

import collections
import math

_LAG_WINDOW = 100_000


class Stats:
    """What the emulator has done since it started."""

    def __init__(self) -> None:
        self.created = 0
        self.dispatched = 0
        self.succeeded = 0
        self.retried = 0
        self.exhausted = 0
        self.duplicated = 0
        # Attempts dispatched per queue id (the last part of its name): how even the load of
        # a sharded kind of queue is.
        self.dispatched_by_queue: collections.Counter[str] = collections.Counter()
        self._lags_us: collections.deque[int] = collections.deque(maxlen=_LAG_WINDOW)

    def record_lag(self, lag_us: int) -> None:
        """Dispatch time minus schedule time of a scheduled (not forced) attempt."""
        self._lags_us.append(max(0, lag_us))

    def reset_lags(self) -> None:
        self._lags_us.clear()

    def snapshot(self, *, queued: int, in_flight: int, queues: int) -> dict[str, object]:
        return {
            "queues": queues,
            "queued": queued,
            "in_flight": in_flight,
            "created": self.created,
            "dispatched": self.dispatched,
            "succeeded": self.succeeded,
            "retried": self.retried,
            "exhausted": self.exhausted,
            "duplicated": self.duplicated,
            "dispatched_by_queue": dict(sorted(self.dispatched_by_queue.items())),
            "dispatch_lag_ms": self._lag_percentiles(),
        }

    def _lag_percentiles(self) -> dict[str, float | int]:
        lags = sorted(self._lags_us)
        result: dict[str, float | int] = {"count": len(lags)}
        for label, q in (("p50", 0.50), ("p90", 0.90), ("p99", 0.99), ("max", 1.0)):
            result[label] = round(percentile(lags, q) / 1000, 3) if lags else 0.0
        return result


def percentile(sorted_values: list[int], q: float) -> int:
    """Nearest-rank percentile of an ascending list."""
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[rank - 1]

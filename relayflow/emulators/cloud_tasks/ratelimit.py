"""The per-queue token bucket behind max_dispatches_per_second."""

from __future__ import annotations

import math

from relayflow.emulators.cloud_tasks.clock import US_PER_S

MAX_BURST_SIZE = 100


def burst_size_for(max_dispatches_per_second: float) -> int:
    """The max_burst_size the service derives from the rate (it is output-only).

    Google does not document the formula; a 500/s queue reports 100. One fifth of a
    second's worth of tokens, at least one and at most 100, reproduces that.
    """
    return max(1, min(MAX_BURST_SIZE, math.ceil(max_dispatches_per_second / 5)))


class TokenBucket:
    """Tokens refill continuously at `rate_per_s` up to `burst`; each dispatch takes one."""

    __slots__ = ("_burst", "_rate_per_s", "_tokens", "_updated_us")

    def __init__(self, *, rate_per_s: float, burst: int, now_us: int) -> None:
        self._rate_per_s = rate_per_s
        self._burst = burst
        self._tokens = float(burst)
        self._updated_us = now_us

    def reconfigure(self, *, rate_per_s: float, burst: int, now_us: int) -> None:
        self._refill(now_us)
        self._rate_per_s = rate_per_s
        self._burst = burst
        self._tokens = min(self._tokens, float(burst))

    def wait_us(self, now_us: int) -> int:
        """How long until a token is available (0 = now)."""
        self._refill(now_us)
        if self._tokens >= 1.0:
            return 0
        return math.ceil((1.0 - self._tokens) / self._rate_per_s * US_PER_S)

    def take(self, now_us: int) -> None:
        self._refill(now_us)
        self._tokens -= 1.0

    def _refill(self, now_us: int) -> None:
        elapsed_us = max(0, now_us - self._updated_us)
        self._tokens = min(
            float(self._burst), self._tokens + elapsed_us * self._rate_per_s / US_PER_S
        )
        self._updated_us = now_us

"""Time sources. Every timestamp in the emulator is integer microseconds since the epoch.

Cloud Tasks truncates schedule_time to the microsecond, so integers keep what clients send
exactly and make retry arithmetic exact in tests.
"""

from __future__ import annotations

import time
from typing import Protocol

US_PER_S = 1_000_000


class Clock(Protocol):
    """Where the engine reads the current time from."""

    def now_us(self) -> int:
        """Current wall-clock time in microseconds since the epoch."""
        ...


class SystemClock:
    """The real wall clock."""

    def now_us(self) -> int:
        return time.time_ns() // 1000


class FakeClock:
    """A clock tests move by hand."""

    def __init__(self, start_us: int = 1_700_000_000 * US_PER_S) -> None:
        self._now_us = start_us

    def now_us(self) -> int:
        return self._now_us

    def advance(self, delta_us: int) -> None:
        self._now_us += delta_us


def seconds_to_us(seconds: float) -> int:
    return round(seconds * US_PER_S)


def us_to_seconds(us: int) -> float:
    return us / US_PER_S

"""Fakes for the client API tests: a clock and a sleep that move only when told to."""

from __future__ import annotations

from dataclasses import dataclass, field

START_EPOCH_S = 1_750_000_000.0


@dataclass
class FakeClock:
    """Epoch seconds that move only when a test says so."""

    now: float = START_EPOCH_S

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class FakeSleep:
    """Records the slow-response delays instead of sleeping through them."""

    calls: list[float] = field(default_factory=list)

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)

"""Fakes for the client API tests: a clock and a sleep that move only when told to, and a
callback sender that records instead of sending."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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


@dataclass
class FakePost:
    """Records callback POSTs (url and body in ``calls``, their headers in ``headers``) and
    answers from a script (statuses, or exceptions to raise)."""

    answers: list[int | Exception] = field(default_factory=list)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)

    def __call__(
        self, url: str, body: dict[str, Any], headers: dict[str, str], timeout_s: float
    ) -> int:
        self.calls.append((url, body))
        self.headers.append(dict(headers))
        answer = self.answers.pop(0) if self.answers else 200
        if isinstance(answer, Exception):
            raise answer
        return answer

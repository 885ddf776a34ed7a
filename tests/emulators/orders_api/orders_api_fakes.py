"""Fakes and helpers for the orders API tests: a clock and a sleep that move only when told
to, and the calls every test makes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from flask.testing import FlaskClient

START_EPOCH_S = 1_750_000_000.0
LABEL_DELAY_S = 2.0


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


def post(client: FlaskClient, path: str, body: dict[str, Any], key: str | None = "k1") -> Any:
    headers = {"Idempotency-Key": key} if key else {}
    return client.post(path, json=body, headers=headers)


def stats(client: FlaskClient, detail: bool = False) -> Any:
    return client.get("/stats?detail=1" if detail else "/stats").get_json()

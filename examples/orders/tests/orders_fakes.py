"""An in-memory stand-in for OrdersApi, so the flow's real handlers run in unit tests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from relayflow import RetryableError

Fault = Callable[[str], None]  # called with the operation's name; raises to fail it


@dataclass
class FakeOrdersApi:
    """Idempotent creates keyed by Idempotency-Key; ``live`` shows what exists now."""

    label_ready_after_polls: int = 0
    faults: dict[str, list[BaseException]] = field(default_factory=dict)
    created: dict[str, dict[str, Any]] = field(default_factory=dict)
    live: dict[str, set[str]] = field(default_factory=dict)
    label_polls: int = 0

    def fail(self, operation: str, *errors: BaseException) -> None:
        """The next calls of ``operation`` raise ``errors``, one each, before it succeeds."""
        self.faults.setdefault(operation, []).extend(errors)

    def _check(self, operation: str) -> None:
        pending = self.faults.get(operation)
        if pending:
            raise pending.pop(0)

    def _create(self, kind: str, key: str) -> dict[str, Any]:
        if key not in self.created:  # a replay under the same key returns the same effect
            self.created[key] = {"id": f"{kind}-{len(self.created) + 1}", "status": "PENDING"}
            self.live.setdefault(kind, set()).add(self.created[key]["id"])
        return self.created[key]

    def _remove(self, kind: str, effect_id: str) -> dict[str, Any]:
        self.live.get(kind, set()).discard(effect_id)  # "already gone" is fine
        return {"id": effect_id}

    def reserve(self, order_id: str, sku: str, quantity: int, *, key: str) -> dict[str, Any]:
        self._check("reserve")
        return self._create("reservation", key)

    def release(self, reservation_id: str) -> dict[str, Any]:
        return self._remove("reservation", reservation_id)

    def charge(
        self, order_id: str, amount_cents: int, currency: str, *, key: str
    ) -> dict[str, Any]:
        self._check("charge")
        return self._create("charge", key)

    def refund(self, charge_id: str, *, key: str) -> dict[str, Any]:
        return self._remove("charge", charge_id)

    def request_label(self, order_id: str, address: str, *, key: str) -> dict[str, Any]:
        self._check("request_label")
        return self._create("label", key)

    def label(self, label_id: str) -> dict[str, Any]:
        self.label_polls += 1
        ready = self.label_polls > self.label_ready_after_polls
        return {"id": label_id, "status": "READY" if ready else "PENDING"}

    def void_label(self, label_id: str) -> dict[str, Any]:
        return self._remove("label", label_id)

    def notify(self, order_id: str, message: str, *, key: str) -> dict[str, Any]:
        self._check("notify")
        return self._create("notification", key)


def slow_down(retry_after_s: float) -> RetryableError:
    """What call_json raises for a 429 with Retry-After."""
    return RetryableError("429 TOO_MANY_REQUESTS", code="HTTP_429", retry_after_s=retry_after_s)

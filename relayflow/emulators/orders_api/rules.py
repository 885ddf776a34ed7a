"""The dependencies' business rules and the knobs ``/admin/config`` turns."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from relayflow.emulators.client_api.errors import ApiError
from relayflow.emulators.orders_api.models import ConfigUpdate

OUT_OF_STOCK_PREFIX = "oos-"
DECLINED_PREFIX = "declined-"
DECLINED_AMOUNT_CENTS = 402


@dataclass(frozen=True)
class OrdersConfig:
    """Label timing (default and per order) and the payments API's rate limiting."""

    label_delay_s: float = 2.0
    # Per order; None as a value: the label never becomes READY.
    label_delays: Mapping[str, float | None] = field(default_factory=dict)
    payments_429_rate: float = 0.0
    payments_retry_after_s: float = 1.0

    def label_ready_at(self, order_id: str, created_at: float) -> float | None:
        if order_id not in self.label_delays:
            return created_at + self.label_delay_s
        delay_s = self.label_delays[order_id]
        return None if delay_s is None else created_at + delay_s

    def updated(self, update: ConfigUpdate) -> OrdersConfig:
        return OrdersConfig(
            label_delay_s=_or(update.label_delay_s, self.label_delay_s),
            label_delays={**self.label_delays, **update.label_delays},
            payments_429_rate=_or(update.payments_429_rate, self.payments_429_rate),
            payments_retry_after_s=_or(update.payments_retry_after_s, self.payments_retry_after_s),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "label_delay_s": self.label_delay_s,
            "label_delays": dict(self.label_delays),
            "payments_429_rate": self.payments_429_rate,
            "payments_retry_after_s": self.payments_retry_after_s,
        }


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


def check_stock(sku: str) -> None:
    """Business rejection: a sku named ``oos-*`` is out of stock (a retry will not help)."""
    if sku.startswith(OUT_OF_STOCK_PREFIX):
        raise ApiError(409, "OUT_OF_STOCK", f"sku {sku!r} is out of stock")


def check_card(order_id: str, amount_cents: int) -> None:
    """Business rejection: 402 for an amount of 402 cents or an order named ``declined-*``."""
    if amount_cents == DECLINED_AMOUNT_CENTS or order_id.startswith(DECLINED_PREFIX):
        raise ApiError(402, "CARD_DECLINED", f"the card for order {order_id!r} was declined")


def rate_limited(retry_after_s: float) -> ApiError:
    """The payments API's "slow down": no charge was made; try again after Retry-After."""
    return ApiError(
        429,
        "RATE_LIMITED",
        "too many requests to the payments API",
        headers={"Retry-After": format(retry_after_s, "g")},
    )

"""Request bodies of the fake order dependencies, validated with pydantic (extra fields refused)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

_ORDER_ID = Field(min_length=1, max_length=200)


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def fields(self) -> dict[str, Any]:
        """The body as the effect keeps it, and as the idempotent comparison sees it."""
        return self.model_dump(mode="json")


class ReservationRequest(_Strict):
    sku: str = Field(min_length=1, max_length=200)
    quantity: int = Field(ge=1, le=1_000_000)
    order_id: str = _ORDER_ID


class ChargeRequest(_Strict):
    order_id: str = _ORDER_ID
    amount_cents: int = Field(ge=1)
    currency: str = Field(pattern=r"^[A-Za-z]{3}$")


class LabelRequest(_Strict):
    order_id: str = _ORDER_ID
    # A one-line string or a structured address: the fake only keeps it.
    address: (
        Annotated[str, Field(min_length=1, max_length=500)]
        | Annotated[dict[str, str], Field(min_length=1, max_length=20)]
    )


class NotificationRequest(_Strict):
    order_id: str = _ORDER_ID
    message: str = Field(min_length=1, max_length=2000)


class ConfigUpdate(_Strict):
    """A partial change; ``label_delays`` is merged, not replaced."""

    label_delay_s: float | None = Field(default=None, ge=0)
    # Per order; null never becomes READY (the poll-timeout case).
    label_delays: dict[str, float | None] = Field(default_factory=dict)
    payments_429_rate: float | None = Field(default=None, ge=0, le=1)
    payments_retry_after_s: float | None = Field(default=None, ge=0)

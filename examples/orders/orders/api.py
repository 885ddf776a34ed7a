"""The order dependencies (inventory, payments, shipping, notifications) over HTTP.

Every create carries an Idempotency-Key; every failure is classified by relayflow's
``call_json`` (5xx, 429 and timeouts retryable, with Retry-After; other 4xx permanent).
"""

from __future__ import annotations

from typing import Any

import requests

from relayflow import call_json


class OrdersApi:
    """One client for the fake order dependencies (``relayflow/emulators/orders_api`` locally)."""

    def __init__(self, base_url: str, *, timeout_s: float, session: requests.Session) -> None:
        self._base = base_url.rstrip("/")
        self._timeout_s = timeout_s
        self._session = session

    def _call(self, method: str, path: str, key: str | None = None, **kw: Any) -> dict[str, Any]:
        headers = {"Idempotency-Key": key} if key else {}
        url = f"{self._base}{path}"
        body = call_json(
            self._session, method, url, timeout_s=self._timeout_s, headers=headers, **kw
        )
        return dict(body)

    def reserve(self, order_id: str, sku: str, quantity: int, *, key: str) -> dict[str, Any]:
        body = {"order_id": order_id, "sku": sku, "quantity": quantity}
        return self._call("POST", "/inventory/reservations", key, json=body)

    def release(self, reservation_id: str) -> dict[str, Any]:
        return self._call("DELETE", f"/inventory/reservations/{reservation_id}")

    def charge(
        self, order_id: str, amount_cents: int, currency: str, *, key: str
    ) -> dict[str, Any]:
        body = {"order_id": order_id, "amount_cents": amount_cents, "currency": currency}
        return self._call("POST", "/payments/charges", key, json=body)

    def refund(self, charge_id: str, *, key: str) -> dict[str, Any]:
        return self._call("POST", f"/payments/charges/{charge_id}/refund", key)

    def request_label(self, order_id: str, address: str, *, key: str) -> dict[str, Any]:
        body = {"order_id": order_id, "address": address}
        return self._call("POST", "/shipping/labels", key, json=body)

    def label(self, label_id: str) -> dict[str, Any]:
        return self._call("GET", f"/shipping/labels/{label_id}")

    def void_label(self, label_id: str) -> dict[str, Any]:
        return self._call("DELETE", f"/shipping/labels/{label_id}")

    def notify(self, order_id: str, message: str, *, key: str) -> dict[str, Any]:
        body = {"order_id": order_id, "message": message}
        return self._call("POST", "/notifications", key, json=body)

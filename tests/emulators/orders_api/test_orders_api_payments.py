"""Payments: charges, declines, the payments API's 429s, refunds."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient
from orders_api_fakes import post, stats

CHARGE = {"order_id": "order-1", "amount_cents": 1999, "currency": "EUR"}


def charge(client: FlaskClient, body: dict[str, Any] = CHARGE, key: str = "k1") -> Any:
    return post(client, "/payments/charges", body, key)


def test_a_charge_succeeds(client: FlaskClient) -> None:
    response = charge(client)

    assert response.status_code == 201
    body = response.get_json()
    assert {k: body[k] for k in (*CHARGE, "status")} == {**CHARGE, "status": "SUCCEEDED"}
    assert body["id"].startswith("ch_")
    assert charge(client).status_code == 200  # replay
    assert stats(client)["side_effects"]["charges_created"] == 1


@pytest.mark.parametrize(
    "body", [{**CHARGE, "amount_cents": 402}, {**CHARGE, "order_id": "declined-7"}]
)
def test_a_declined_card_is_402(client: FlaskClient, body: dict[str, Any]) -> None:
    response = charge(client, body)

    assert response.status_code == 402
    assert response.get_json()["error"]["code"] == "CARD_DECLINED"
    assert stats(client)["side_effects"]["charges_created"] == 0
    assert stats(client)["business_rejections"] == 1


def test_the_configured_share_is_answered_429_with_retry_after(
    client: FlaskClient, rolls: list[float]
) -> None:
    config = {"payments_429_rate": 0.25, "payments_retry_after_s": 3}
    assert client.post("/admin/config", json=config).get_json()["payments_429_rate"] == 0.25
    rolls.extend([0.24, 0.25])

    limited = charge(client)
    retried = charge(client)

    assert limited.status_code == 429
    assert limited.headers["Retry-After"] == "3"
    assert limited.get_json()["error"]["code"] == "RATE_LIMITED"
    assert retried.status_code == 201  # the 429 made no charge and did not use the key
    assert stats(client)["payments_rate_limited"] == 1
    assert stats(client)["side_effects"]["charges_created"] == 1


def test_no_429_draw_while_the_rate_is_zero(client: FlaskClient, rolls: list[float]) -> None:
    rolls.extend([0.0, 0.0])

    assert charge(client).status_code == 201
    assert rolls == [0.0, 0.0]


def test_refund_is_idempotent_needs_no_key_and_is_counted_once(client: FlaskClient) -> None:
    charge_id = charge(client).get_json()["id"]

    first = client.post(f"/payments/charges/{charge_id}/refund")
    second = client.post(f"/payments/charges/{charge_id}/refund")

    assert first.status_code == second.status_code == 200
    assert client.get(f"/payments/charges/{charge_id}").get_json()["status"] == "REFUNDED"
    assert stats(client)["side_effects"]["charges_refunded"] == 1
    assert stats(client)["live"]["charges_not_refunded"] == 0


def test_refund_of_an_unknown_charge_is_not_found(client: FlaskClient) -> None:
    assert client.post("/payments/charges/ch_nope/refund").status_code == 404


@pytest.mark.parametrize(
    "body", [{**CHARGE, "currency": "EURO"}, {**CHARGE, "amount_cents": 0}, {"order_id": "o"}]
)
def test_invalid_charges_are_refused(client: FlaskClient, body: dict[str, Any]) -> None:
    assert charge(client, body).status_code == 400

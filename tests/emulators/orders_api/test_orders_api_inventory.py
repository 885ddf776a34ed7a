"""Inventory: reservations held under an Idempotency-Key, out of stock, release."""

from __future__ import annotations

from typing import Any

from flask.testing import FlaskClient
from orders_api_fakes import post, stats

ITEM = {"sku": "widget-1", "quantity": 2, "order_id": "order-1"}


def reserve(client: FlaskClient, body: dict[str, Any] = ITEM, key: str | None = "k1") -> Any:
    return post(client, "/inventory/reservations", body, key)


def test_a_reservation_is_held(client: FlaskClient) -> None:
    response = reserve(client)

    assert response.status_code == 201
    body = response.get_json()
    assert {k: body[k] for k in (*ITEM, "status")} == {**ITEM, "status": "HELD"}
    assert body["id"].startswith("res_")
    assert client.get(f"/inventory/reservations/{body['id']}").get_json() == body


def test_the_same_key_replays_and_another_body_conflicts(client: FlaskClient) -> None:
    first = reserve(client).get_json()

    replay = reserve(client)
    other = reserve(client, {**ITEM, "quantity": 3})

    assert (replay.status_code, replay.get_json()) == (200, first)
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert other.status_code == 409
    assert other.get_json()["error"]["code"] == "IDEMPOTENCY_KEY_REUSED"
    assert stats(client)["side_effects"]["reservations_created"] == 1
    assert stats(client)["idempotent_replays"] == 1


def test_an_oos_sku_is_a_business_rejection(client: FlaskClient) -> None:
    response = reserve(client, {**ITEM, "sku": "oos-widget"})

    assert response.status_code == 409
    assert response.get_json()["error"]["code"] == "OUT_OF_STOCK"
    assert reserve(client, {**ITEM, "sku": "oos-widget"}).status_code == 409  # not remembered
    assert stats(client)["side_effects"]["reservations_created"] == 0
    assert stats(client)["business_rejections"] == 2


def test_release_is_idempotent_and_counted_once(client: FlaskClient) -> None:
    reservation_id = reserve(client).get_json()["id"]

    first = client.delete(f"/inventory/reservations/{reservation_id}")
    second = client.delete(f"/inventory/reservations/{reservation_id}")

    assert first.status_code == second.status_code == 200
    assert second.get_json()["status"] == "RELEASED"
    assert stats(client)["side_effects"]["reservations_released"] == 1
    assert stats(client)["live"]["reservations_held"] == 0


def test_unknown_reservations_are_not_found(client: FlaskClient) -> None:
    assert client.get("/inventory/reservations/res_nope").status_code == 404
    assert client.delete("/inventory/reservations/res_nope").status_code == 404
    assert stats(client)["side_effects"]["reservations_released"] == 0


def test_a_key_and_a_valid_body_are_required(client: FlaskClient) -> None:
    assert reserve(client, key=None).status_code == 400
    bad = reserve(client, {**ITEM, "quantity": 0})
    assert bad.status_code == 400
    assert "quantity" in bad.get_json()["error"]["message"]
    assert reserve(client, {**ITEM, "extra": 1}).status_code == 400

"""Shipping: labels turn READY after their delay (per order if configured), and can be voided."""

from __future__ import annotations

from typing import Any

from flask.testing import FlaskClient
from orders_api_fakes import LABEL_DELAY_S, FakeClock, post, stats


def create_label(client: FlaskClient, order_id: str = "order-1", key: str = "k1") -> Any:
    return post(client, "/shipping/labels", {"order_id": order_id, "address": "1 Main St"}, key)


def status(client: FlaskClient, label_id: str) -> str:
    result: str = client.get(f"/shipping/labels/{label_id}").get_json()["status"]
    return result


def test_a_label_is_pending_then_ready(client: FlaskClient, clock: FakeClock) -> None:
    created = create_label(client)
    label_id = created.get_json()["id"]

    clock.advance(LABEL_DELAY_S - 0.001)
    before = client.get(f"/shipping/labels/{label_id}").get_json()
    clock.advance(0.001)
    after = client.get(f"/shipping/labels/{label_id}").get_json()

    assert (created.status_code, created.get_json()["status"]) == (201, "PENDING")
    assert (before["status"], "tracking_number" in before) == ("PENDING", False)
    assert after["status"] == "READY"
    assert after["tracking_number"].startswith("TRK")


def test_a_structured_address_is_kept(client: FlaskClient) -> None:
    address = {"line1": "1 Main St", "city": "Springfield"}

    body = post(client, "/shipping/labels", {"order_id": "o", "address": address}).get_json()

    assert body["address"] == address


def test_per_order_delays_override_and_null_never_gets_ready(
    client: FlaskClient, clock: FakeClock
) -> None:
    client.post("/admin/config", json={"label_delays": {"slow": 60, "stuck": None}})
    slow = create_label(client, "slow", "a").get_json()["id"]
    stuck = create_label(client, "stuck", "b").get_json()["id"]
    normal = create_label(client, "normal", "c").get_json()["id"]

    clock.advance(59)
    assert [status(client, i) for i in (slow, stuck, normal)] == ["PENDING", "PENDING", "READY"]
    clock.advance(1_000_000)
    assert [status(client, i) for i in (slow, stuck)] == ["READY", "PENDING"]


def test_a_label_delay_is_fixed_when_the_label_is_created(
    client: FlaskClient, clock: FakeClock
) -> None:
    label_id = create_label(client).get_json()["id"]

    client.post("/admin/config", json={"label_delay_s": 600})
    clock.advance(LABEL_DELAY_S)

    assert status(client, label_id) == "READY"


def test_void_is_idempotent_and_counted_once(client: FlaskClient, clock: FakeClock) -> None:
    label_id = create_label(client).get_json()["id"]
    clock.advance(LABEL_DELAY_S)

    first = client.delete(f"/shipping/labels/{label_id}")
    second = client.delete(f"/shipping/labels/{label_id}")

    assert first.status_code == second.status_code == 200
    assert second.get_json()["status"] == "VOIDED"
    assert stats(client)["side_effects"]["labels_voided"] == 1
    assert stats(client)["live"]["labels_not_voided"] == 0


def test_unknown_labels_are_not_found(client: FlaskClient) -> None:
    assert client.get("/shipping/labels/lbl_nope").status_code == 404
    assert client.delete("/shipping/labels/lbl_nope").status_code == 404

"""Notifications, stats, faults, config, reset, health and the command line."""

from __future__ import annotations

from flask.testing import FlaskClient
from orders_api_fakes import FakeClock, FakeSleep, post, stats

from relayflow.emulators.orders_api.__main__ import parse_args

RESERVATION = {"sku": "widget-1", "quantity": 1, "order_id": "order-1"}
CHARGE = {"order_id": "order-1", "amount_cents": 500, "currency": "USD"}


def test_a_notification_is_sent_once_per_key(client: FlaskClient) -> None:
    body = {"order_id": "order-1", "message": "shipped"}

    first = post(client, "/notifications", body)
    again = post(client, "/notifications", body)

    assert (first.status_code, first.get_json()["status"]) == (201, "SENT")
    assert (again.status_code, again.get_json()["id"]) == (200, first.get_json()["id"])
    assert stats(client)["side_effects"]["notifications_sent"] == 1


def test_stats_count_side_effects_and_live_effects(client: FlaskClient, clock: FakeClock) -> None:
    reservation = post(client, "/inventory/reservations", RESERVATION).get_json()["id"]
    other = {**RESERVATION, "order_id": "order-2"}
    held = post(client, "/inventory/reservations", other, "k2").get_json()["id"]
    charge = post(client, "/payments/charges", CHARGE).get_json()["id"]
    label = post(client, "/shipping/labels", {"order_id": "order-1", "address": "x"}).get_json()
    note = post(client, "/notifications", {"order_id": "order-1", "message": "hi"}).get_json()
    client.delete(f"/inventory/reservations/{reservation}")
    client.post(f"/payments/charges/{charge}/refund")

    assert stats(client) == {
        "side_effects": {
            "reservations_created": 2,
            "reservations_released": 1,
            "charges_created": 1,
            "charges_refunded": 1,
            "labels_created": 1,
            "labels_voided": 0,
            "notifications_sent": 1,
        },
        "requests": 7,
        "idempotent_replays": 0,
        "faults_injected": 0,
        "business_rejections": 0,
        "payments_rate_limited": 0,
        "live": {
            "reservations_held": 1,
            "charges_not_refunded": 0,
            "labels_not_voided": 1,
            "notifications_sent": 1,
        },
    }
    # Per order, what is still in effect: order-1's reservation and charge were undone.
    assert stats(client, detail=True)["live"]["orders"] == {
        "order-1": {"labels": [label["id"]], "notifications": [note["id"]]},
        "order-2": {"reservations": [held]},
    }


def test_faults_hit_business_routes_and_a_lost_response_still_takes_effect(
    client: FlaskClient,
) -> None:
    rule = {"path_prefix": "/payments", "status": 500, "after_effect": True, "count": None}
    client.post("/admin/faults", json=[rule])

    lost = post(client, "/payments/charges", CHARGE)
    retried = post(client, "/payments/charges", CHARGE)
    reserved = post(client, "/inventory/reservations", RESERVATION)

    assert (lost.status_code, retried.status_code, reserved.status_code) == (500, 500, 201)
    assert stats(client)["side_effects"]["charges_created"] == 1
    assert stats(client)["idempotent_replays"] == 1
    assert stats(client)["faults_injected"] == 2


def test_a_slow_fault_answers_late_then_normally(client: FlaskClient, slept: FakeSleep) -> None:
    client.post("/admin/faults", json=[{"path_prefix": "/shipping", "delay_s": 12}])

    response = post(client, "/shipping/labels", {"order_id": "o", "address": "x"})

    assert (response.status_code, slept.calls) == (201, [12])


def test_admin_stats_and_health_are_never_faulted(client: FlaskClient) -> None:
    client.post("/admin/faults", json=[{"status": 503, "count": -1}])

    assert client.get("/healthz").get_json() == {"status": "ok"}
    assert client.get("/admin/faults").status_code == 200
    assert stats(client)["requests"] == 0


def test_config_merges_and_answers_the_whole_config(client: FlaskClient) -> None:
    client.post("/admin/config", json={"label_delays": {"a": 1}})

    config = client.post("/admin/config", json={"label_delays": {"b": None}}).get_json()

    assert config == {
        "label_delay_s": 2.0,
        "label_delays": {"a": 1, "b": None},
        "payments_429_rate": 0.0,
        "payments_retry_after_s": 1.0,
    }
    assert client.post("/admin/config", json={"payments_429_rate": 2}).status_code == 400


def test_reset_forgets_effects_keys_faults_and_config(client: FlaskClient) -> None:
    first = post(client, "/inventory/reservations", RESERVATION).get_json()["id"]
    client.post("/admin/config", json={"payments_429_rate": 1})
    client.post("/admin/faults", json=[{"status": 500, "count": None}])

    assert client.post("/admin/reset").status_code == 200

    assert client.get(f"/inventory/reservations/{first}").status_code == 404
    again = post(client, "/inventory/reservations", RESERVATION)
    assert (again.status_code, post(client, "/payments/charges", CHARGE).status_code) == (201, 201)
    assert stats(client)["side_effects"]["reservations_created"] == 1


def test_unknown_route_answers_json_404(client: FlaskClient) -> None:
    response = client.get("/inventory/nope")

    assert (response.status_code, response.get_json()["error"]["code"]) == (404, "NOT_FOUND")


def test_command_line() -> None:
    assert (parse_args([]).host, parse_args([]).port, parse_args([]).label_delay_s) == (
        "127.0.0.1",
        8130,
        2.0,
    )
    args = parse_args(["--port", "9999", "--label-delay-s", "0.5"])
    assert (args.port, args.label_delay_s) == (9999, 0.5)

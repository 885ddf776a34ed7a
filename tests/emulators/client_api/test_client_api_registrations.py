"""Registrations: idempotent creation, activation on the clock, rejection, cancellation."""

from __future__ import annotations

from typing import Any

from client_api_fakes import FakeClock
from flask.testing import FlaskClient


def register(client: FlaskClient, resource: str, key: str = "key-1") -> Any:
    return client.post(
        "/registrations", json={"resource": resource}, headers={"Idempotency-Key": key}
    )


def side_effects(client: FlaskClient) -> dict[str, int]:
    stats: dict[str, dict[str, int]] = client.get("/stats").get_json()
    return stats["side_effects"]


def test_create_returns_a_pending_registration(client: FlaskClient) -> None:
    response = register(client, "acme")

    assert response.status_code == 201
    body = response.get_json()
    assert body["resource"] == "acme"
    assert body["status"] == "PENDING"
    assert body["id"].startswith("reg_")
    assert body["created_at"].endswith("Z")


def test_missing_idempotency_key_is_refused(client: FlaskClient) -> None:
    response = client.post("/registrations", json={"resource": "acme"})

    assert response.status_code == 400
    assert response.get_json()["error"]["code"] == "IDEMPOTENCY_KEY_REQUIRED"
    assert side_effects(client)["registrations_created"] == 0


def test_invalid_body_is_refused(client: FlaskClient) -> None:
    response = client.post(
        "/registrations", json={"resource": ""}, headers={"Idempotency-Key": "k"}
    )

    assert response.status_code == 400
    assert response.get_json()["error"]["code"] == "INVALID_ARGUMENT"


def test_non_json_body_is_refused(client: FlaskClient) -> None:
    response = client.post("/registrations", data="nope", headers={"Idempotency-Key": "k"})

    assert response.status_code == 400


def test_same_key_replays_without_a_new_side_effect(client: FlaskClient) -> None:
    first = register(client, "acme").get_json()

    again = register(client, "acme")

    assert again.status_code == 200
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.get_json()["id"] == first["id"]
    stats = client.get("/stats").get_json()
    assert stats["side_effects"]["registrations_created"] == 1
    assert stats["idempotent_replays"] == 1


def test_same_key_with_another_body_conflicts(client: FlaskClient) -> None:
    register(client, "acme")

    response = register(client, "other")

    assert response.status_code == 409
    assert response.get_json()["error"]["code"] == "IDEMPOTENCY_KEY_REUSED"
    assert side_effects(client)["registrations_created"] == 1


def test_different_keys_create_different_registrations(client: FlaskClient) -> None:
    first = register(client, "acme", key="a").get_json()
    second = register(client, "acme", key="b").get_json()

    assert first["id"] != second["id"]
    assert side_effects(client)["registrations_created"] == 2


def test_status_turns_active_once_the_delay_has_passed(
    client: FlaskClient, clock: FakeClock
) -> None:
    registration_id = register(client, "acme").get_json()["id"]

    clock.advance(1.999)
    before = client.get(f"/registrations/{registration_id}").get_json()
    clock.advance(0.001)
    after = client.get(f"/registrations/{registration_id}").get_json()

    assert before["status"] == "PENDING"
    assert after == {**before, "status": "ACTIVE"}


def test_replay_shows_the_current_status(client: FlaskClient, clock: FakeClock) -> None:
    register(client, "acme")
    clock.advance(5)

    assert register(client, "acme").get_json()["status"] == "ACTIVE"


def test_reject_resources_are_refused_permanently(client: FlaskClient) -> None:
    response = register(client, "reject-me")

    assert response.status_code == 422
    error = response.get_json()["error"]
    assert error["code"] == "REJECTED"
    assert "reject-me" in error["message"]
    assert register(client, "reject-me").status_code == 422
    assert side_effects(client)["registrations_created"] == 0


def test_unknown_registration_is_not_found(client: FlaskClient) -> None:
    response = client.get("/registrations/reg_nope")

    assert response.status_code == 404
    assert response.get_json()["error"]["code"] == "NOT_FOUND"


def test_delete_cancels_once_and_is_idempotent(client: FlaskClient, clock: FakeClock) -> None:
    registration_id = register(client, "acme").get_json()["id"]
    clock.advance(10)

    first = client.delete(f"/registrations/{registration_id}")
    second = client.delete(f"/registrations/{registration_id}")

    assert first.status_code == second.status_code == 200
    assert second.get_json()["status"] == "CANCELLED"
    assert client.get(f"/registrations/{registration_id}").get_json()["status"] == "CANCELLED"
    assert side_effects(client)["registrations_cancelled"] == 1


def test_delete_unknown_registration_is_not_found(client: FlaskClient) -> None:
    assert client.delete("/registrations/reg_nope").status_code == 404
    assert side_effects(client)["registrations_cancelled"] == 0

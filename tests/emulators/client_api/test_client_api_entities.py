"""Entities: only on an ACTIVE registration, idempotent under their key."""

from __future__ import annotations

from typing import Any

from client_api_fakes import FakeClock
from flask.testing import FlaskClient


def active_registration(client: FlaskClient, clock: FakeClock) -> str:
    response = client.post(
        "/registrations", json={"resource": "acme"}, headers={"Idempotency-Key": "reg"}
    )
    clock.advance(60)
    registration_id: str = response.get_json()["id"]
    return registration_id


def create_entity(client: FlaskClient, registration_id: str, key: str = "ent-1") -> Any:
    return client.post(
        "/entities",
        json={"registration_id": registration_id, "name": "widget"},
        headers={"Idempotency-Key": key},
    )


def test_entity_on_an_active_registration_is_created(client: FlaskClient, clock: FakeClock) -> None:
    registration_id = active_registration(client, clock)

    response = create_entity(client, registration_id)

    assert response.status_code == 201
    body = response.get_json()
    assert body["registration_id"] == registration_id
    assert body["name"] == "widget"
    assert body["id"].startswith("ent_")


def test_entity_on_a_pending_registration_is_not_active(client: FlaskClient) -> None:
    registration_id = client.post(
        "/registrations", json={"resource": "acme"}, headers={"Idempotency-Key": "reg"}
    ).get_json()["id"]

    response = create_entity(client, registration_id)

    assert response.status_code == 409
    assert response.get_json()["error"]["code"] == "NOT_ACTIVE"


def test_not_active_is_not_remembered_under_the_key(client: FlaskClient, clock: FakeClock) -> None:
    registration_id = client.post(
        "/registrations", json={"resource": "acme"}, headers={"Idempotency-Key": "reg"}
    ).get_json()["id"]
    assert create_entity(client, registration_id).status_code == 409

    clock.advance(60)

    assert create_entity(client, registration_id).status_code == 201


def test_entity_on_a_cancelled_registration_is_not_active(
    client: FlaskClient, clock: FakeClock
) -> None:
    registration_id = active_registration(client, clock)
    client.delete(f"/registrations/{registration_id}")

    response = create_entity(client, registration_id)

    assert response.status_code == 409
    assert response.get_json()["error"]["code"] == "NOT_ACTIVE"


def test_entity_on_an_unknown_registration_is_not_found(client: FlaskClient) -> None:
    assert create_entity(client, "reg_nope").status_code == 404


def test_same_key_returns_the_same_entity(client: FlaskClient, clock: FakeClock) -> None:
    registration_id = active_registration(client, clock)
    first = create_entity(client, registration_id).get_json()

    again = create_entity(client, registration_id)

    assert again.status_code == 200
    assert again.get_json() == first
    assert client.get("/stats").get_json()["side_effects"]["entities_created"] == 1


def test_entity_keys_are_separate_from_registration_keys(
    client: FlaskClient, clock: FakeClock
) -> None:
    registration_id = active_registration(client, clock)

    # "reg" already named a registration; as an entity key it is new.
    response = create_entity(client, registration_id, key="reg")

    assert response.status_code == 201


def test_entity_without_key_is_refused(client: FlaskClient) -> None:
    response = client.post("/entities", json={"registration_id": "r", "name": "n"})

    assert response.status_code == 400


def test_delete_entity_is_an_idempotent_compensation(client: FlaskClient, clock: FakeClock) -> None:
    entity_id = create_entity(client, active_registration(client, clock)).get_json()["id"]

    first = client.delete(f"/entities/{entity_id}")
    second = client.delete(f"/entities/{entity_id}")

    assert first.status_code == second.status_code == 200
    assert second.get_json()["deleted"] is True
    assert client.get(f"/entities/{entity_id}").get_json()["deleted"] is True
    side_effects = client.get("/stats").get_json()["side_effects"]
    assert (side_effects["entities_created"], side_effects["entities_deleted"]) == (1, 1)


def test_a_deleted_entity_is_replayed_not_recreated_under_its_key(
    client: FlaskClient, clock: FakeClock
) -> None:
    registration_id = active_registration(client, clock)
    entity_id = create_entity(client, registration_id).get_json()["id"]
    client.delete(f"/entities/{entity_id}")

    again = create_entity(client, registration_id)

    assert again.status_code == 200
    assert (again.get_json()["id"], again.get_json()["deleted"]) == (entity_id, True)
    assert client.get("/stats").get_json()["side_effects"]["entities_created"] == 1


def test_delete_unknown_entity_is_not_found(client: FlaskClient) -> None:
    response = client.delete("/entities/ent_nope")

    assert response.status_code == 404
    assert client.get("/stats").get_json()["side_effects"]["entities_deleted"] == 0

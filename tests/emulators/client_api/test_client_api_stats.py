"""/stats live effects: what a chaos bench compares with the flows that succeeded."""

from __future__ import annotations

from typing import Any

from client_api_fakes import FakeClock
from flask.testing import FlaskClient


def register(client: FlaskClient, resource: str, key: str) -> str:
    response = client.post(
        "/registrations", json={"resource": resource}, headers={"Idempotency-Key": key}
    )
    registration_id: str = response.get_json()["id"]
    return registration_id


def create_entity(client: FlaskClient, registration_id: str, key: str) -> str:
    response = client.post(
        "/entities",
        json={"registration_id": registration_id, "name": "widget"},
        headers={"Idempotency-Key": key},
    )
    entity_id: str = response.get_json()["id"]
    return entity_id


def live(client: FlaskClient, detail: bool = False) -> Any:
    return client.get("/stats?detail=1" if detail else "/stats").get_json()["live"]


def test_live_counts_what_was_created_and_not_undone(client: FlaskClient, clock: FakeClock) -> None:
    kept = register(client, "flow-1", "k1")
    cancelled = register(client, "flow-2", "k2")
    clock.advance(10)
    kept_entity = create_entity(client, kept, "e1")
    deleted_entity = create_entity(client, kept, "e2")
    client.delete(f"/registrations/{cancelled}")
    client.delete(f"/entities/{deleted_entity}")

    assert live(client) == {"registrations": 1, "entities": 1}
    assert live(client, detail=True) == {
        "registrations": 1,
        "entities": 1,
        "registrations_by_resource": {"flow-1": [kept]},
        "entities_by_registration": {kept: [kept_entity]},
    }


def test_detail_shows_a_duplicate_effect_per_resource(client: FlaskClient) -> None:
    # Two keys for one flow's resource: the duplicate a chaos bench must catch.
    first = register(client, "flow-1", "k1")
    second = register(client, "flow-1", "k2")
    register(client, "flow-1", "k1")  # a replay is not an effect

    assert live(client, detail=True)["registrations_by_resource"] == {"flow-1": [first, second]}


def test_an_entity_left_on_a_cancelled_registration_stays_visible(
    client: FlaskClient, clock: FakeClock
) -> None:
    registration_id = register(client, "flow-1", "k1")
    clock.advance(10)
    entity_id = create_entity(client, registration_id, "e1")
    client.delete(f"/registrations/{registration_id}")

    detail = live(client, detail=True)

    # The orphan: an entity whose registration is no longer live.
    assert detail["registrations_by_resource"] == {}
    assert detail["entities_by_registration"] == {registration_id: [entity_id]}


def test_reset_forgets_live_effects(client: FlaskClient) -> None:
    register(client, "flow-1", "k1")

    client.post("/admin/reset")

    assert live(client, detail=True) == {
        "registrations": 0,
        "entities": 0,
        "registrations_by_resource": {},
        "entities_by_registration": {},
    }

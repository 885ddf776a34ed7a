"""Admin endpoints: fault injection, activation config, reset, stats and health."""

from __future__ import annotations

from typing import Any

from client_api_fakes import FakeClock, FakeSleep
from flask.testing import FlaskClient


def register(client: FlaskClient, resource: str = "acme", key: str = "key-1") -> Any:
    return client.post(
        "/registrations", json={"resource": resource}, headers={"Idempotency-Key": key}
    )


def stats(client: FlaskClient) -> Any:
    return client.get("/stats").get_json()


def test_fault_fails_the_next_count_matching_requests(client: FlaskClient) -> None:
    armed = client.post(
        "/admin/faults",
        json=[{"method": "POST", "path_prefix": "/registrations", "status": 503, "count": 2}],
    )
    assert armed.status_code == 201

    statuses = [register(client, key=f"k{i}").status_code for i in range(3)]

    assert statuses == [503, 503, 201]
    assert stats(client)["faults_injected"] == 2
    assert stats(client)["side_effects"]["registrations_created"] == 1


def test_fault_body_and_retry_after(client: FlaskClient) -> None:
    client.post("/admin/faults", json=[{"status": 429, "retry_after_s": 3}])

    response = register(client)

    assert response.status_code == 429
    assert response.headers["Retry-After"] == "3"
    assert response.get_json()["error"]["code"] == "INJECTED_FAULT"


def test_fault_matches_method_and_prefix_only(client: FlaskClient) -> None:
    client.post(
        "/admin/faults", json=[{"method": "GET", "path_prefix": "/entities", "status": 500}]
    )

    assert register(client).status_code == 201
    assert client.get("/admin/faults").get_json()["rules"][0]["remaining"] == 1


def test_delay_only_fault_answers_slowly_then_normally(
    client: FlaskClient, slept: FakeSleep
) -> None:
    client.post("/admin/faults", json={"rules": [{"delay_s": 1.5}]})

    response = register(client)

    assert response.status_code == 201
    assert slept.calls == [1.5]


def test_after_effect_fault_performs_the_request_then_fails(client: FlaskClient) -> None:
    client.post("/admin/faults", json=[{"status": 503, "after_effect": True}])

    lost = register(client)
    retried = register(client)

    assert lost.status_code == 503
    assert retried.status_code == 200  # the retry with the same key is a replay
    assert stats(client)["side_effects"]["registrations_created"] == 1


def test_probability_spends_budget_only_when_it_fires(
    client: FlaskClient, rolls: list[float]
) -> None:
    rolls.extend([0.9, 0.1])
    client.post("/admin/faults", json=[{"status": 500, "probability": 0.5}])

    assert register(client, key="a").status_code == 201
    assert register(client, key="b").status_code == 500
    assert register(client, key="c").status_code == 201


def test_admin_stats_and_health_are_never_faulted(client: FlaskClient) -> None:
    client.post("/admin/faults", json=[{"status": 500, "count": 100}])

    assert client.get("/healthz").status_code == 200
    assert client.get("/stats").status_code == 200
    assert stats(client)["requests"] == 0


def test_invalid_fault_rules_are_refused(client: FlaskClient) -> None:
    assert client.post("/admin/faults", json=[{"count": 1}]).status_code == 400
    assert client.post("/admin/faults", json=[{"status": 200}]).status_code == 400
    assert client.post("/admin/faults", json=[{"status": 500, "bogus": 1}]).status_code == 400


def test_delete_faults_clears_them(client: FlaskClient) -> None:
    client.post("/admin/faults", json=[{"status": 500, "count": 5}])

    client.delete("/admin/faults")

    assert register(client).status_code == 201


def test_config_changes_the_default_delay(client: FlaskClient, clock: FakeClock) -> None:
    client.post("/admin/config", json={"activation_delay_s": 0})

    registration = register(client).get_json()

    assert registration["status"] == "ACTIVE"


def test_resource_delay_null_never_activates(client: FlaskClient, clock: FakeClock) -> None:
    client.post("/admin/config", json={"resource_delays": {"stuck": None, "slow": 100}})
    stuck = register(client, "stuck", key="a").get_json()["id"]
    slow = register(client, "slow", key="b").get_json()["id"]
    normal = register(client, "acme", key="c").get_json()["id"]

    clock.advance(99)
    assert [
        client.get(f"/registrations/{i}").get_json()["status"] for i in (stuck, slow, normal)
    ] == [
        "PENDING",
        "PENDING",
        "ACTIVE",
    ]
    clock.advance(1_000_000)
    assert client.get(f"/registrations/{stuck}").get_json()["status"] == "PENDING"
    assert client.get(f"/registrations/{slow}").get_json()["status"] == "ACTIVE"


def test_config_merges_resource_delays(client: FlaskClient) -> None:
    client.post("/admin/config", json={"resource_delays": {"a": 1}})

    config = client.post("/admin/config", json={"resource_delays": {"b": None}}).get_json()

    assert config == {
        "activation_delay_s": 2.0,
        "resource_delays": {"a": 1, "b": None},
        "callback_default_mode": "on_time",
        "callback_modes": {},
        "callback_late_s": 5.0,
    }


def test_reset_clears_state_faults_config_and_stats(client: FlaskClient) -> None:
    registration_id = register(client).get_json()["id"]
    client.post("/admin/config", json={"activation_delay_s": 0})
    client.post("/admin/faults", json=[{"status": 500, "path_prefix": "/entities"}])

    assert client.post("/admin/reset").status_code == 200

    assert client.get(f"/registrations/{registration_id}").status_code == 404
    assert client.get("/admin/faults").get_json() == {"rules": []}
    assert register(client).get_json()["status"] == "PENDING"  # default delay again
    assert stats(client)["side_effects"]["registrations_created"] == 1


def test_stats_shape(client: FlaskClient) -> None:
    register(client)

    assert stats(client) == {
        "side_effects": {
            "registrations_created": 1,
            "entities_created": 0,
            "registrations_cancelled": 0,
            "entities_deleted": 0,
        },
        "requests": 1,
        "idempotent_replays": 0,
        "faults_injected": 0,
        "callbacks_sent": 0,
        "callbacks_failed": 0,
        "callbacks_pending": 0,
        "live": {"registrations": 1, "entities": 0},
    }


def test_unknown_route_answers_json_404(client: FlaskClient) -> None:
    response = client.get("/nope")

    assert response.status_code == 404
    assert response.get_json()["error"]["code"] == "NOT_FOUND"

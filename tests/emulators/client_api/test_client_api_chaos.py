"""Fault rules for a chaos run: rules that never run out, and shares that add up."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
from client_api_fakes import FakeClock, FakeSleep
from flask.testing import FlaskClient

from relayflow.emulators.client_api.app import create_app

# The chaos mix of issue 7: 20 % 5xx, 5 % 429 with Retry-After, 10 % lost responses (effect
# done, 500 returned), 5 % slower than the client's timeout — on every business route.
CHAOS = [
    {"status": 503, "probability": 0.20, "count": None},
    {"status": 429, "retry_after_s": 2, "probability": 0.05, "count": None},
    {"status": 500, "after_effect": True, "probability": 0.10, "count": None},
    {"delay_s": 30, "probability": 0.05, "count": -1},
]


def register(client: FlaskClient, key: str, resource: str = "acme") -> Any:
    return client.post(
        "/registrations", json={"resource": resource}, headers={"Idempotency-Key": key}
    )


def stats(client: FlaskClient) -> Any:
    return client.get("/stats").get_json()


@pytest.mark.parametrize("count", [None, -1])
def test_an_unlimited_rule_never_runs_out(client: FlaskClient, count: int | None) -> None:
    client.post("/admin/faults", json=[{"status": 500, "count": count}])

    statuses = {register(client, key=f"k{i}").status_code for i in range(300)}

    assert statuses == {500}
    assert [r["remaining"] for r in client.get("/admin/faults").get_json()["rules"]] == [None]
    assert stats(client)["faults_injected"] == 300


@pytest.mark.parametrize("count", [0, -2])
def test_a_count_below_one_other_than_unlimited_is_refused(client: FlaskClient, count: int) -> None:
    response = client.post("/admin/faults", json=[{"status": 500, "count": count}])

    assert response.status_code == 400
    assert "count" in response.get_json()["error"]["message"]


def test_shares_add_up_and_one_draw_decides(
    client: FlaskClient, rolls: list[float], slept: FakeSleep
) -> None:
    client.post("/admin/faults", json=CHAOS)
    # Bands: [0, .20) 503, [.20, .25) 429, [.25, .35) lost, [.35, .40) slow, [.40, 1) none.
    rolls.extend([0.10, 0.21, 0.30, 0.37, 0.40, 0.99])

    responses = [register(client, key=f"k{i}") for i in range(6)]

    assert [r.status_code for r in responses] == [503, 429, 500, 201, 201, 201]
    assert responses[1].headers["Retry-After"] == "2"
    assert slept.calls == [30]
    assert rolls == []  # exactly one draw per request
    # The lost response and the slow one both took effect.
    assert stats(client)["side_effects"]["registrations_created"] == 4


def test_the_chaos_mix_faults_each_share_of_all_business_routes() -> None:
    sleeper = FakeSleep()
    app = create_app(clock=FakeClock(), sleep=sleeper, rand=random.Random(7).random)
    client = app.test_client()
    client.post("/admin/faults", json=CHAOS)
    outcomes: Counter[str] = Counter()
    requests = 4000

    for i in range(requests):
        slept_before = len(sleeper.calls)
        response = _any_business_call(client, i)
        slow = len(sleeper.calls) > slept_before
        outcomes["slow" if slow else str(response.status_code)] += 1

    faulted = {k: outcomes[k] for k in ("503", "429", "500", "slow")}
    shares = {k: v / requests for k, v in faulted.items()}
    assert shares["503"] == pytest.approx(0.20, abs=0.025)
    assert shares["429"] == pytest.approx(0.05, abs=0.015)
    assert shares["500"] == pytest.approx(0.10, abs=0.02)
    assert shares["slow"] == pytest.approx(0.05, abs=0.015)
    assert stats(client)["faults_injected"] == sum(faulted.values())


def _any_business_call(client: FlaskClient, i: int) -> Any:
    """Round-robin over create, read and cancel of registrations and entities."""
    key = f"k{i}"
    calls = [
        lambda: register(client, key),
        lambda: client.get("/registrations/reg_unknown"),
        lambda: client.delete("/registrations/reg_unknown"),
        lambda: client.post("/entities", json={"registration_id": "r", "name": "n"}),
        lambda: client.delete("/entities/ent_unknown"),
    ]
    return calls[i % len(calls)]()


def test_a_spent_rule_lets_the_next_one_move_up(client: FlaskClient) -> None:
    client.post("/admin/faults", json=[{"status": 503, "count": 2}, {"status": 429, "count": None}])

    statuses = [register(client, key=f"k{i}").status_code for i in range(4)]

    assert statuses == [503, 503, 429, 429]

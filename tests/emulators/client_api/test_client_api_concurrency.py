"""Concurrent retries under one idempotency key create exactly one registration."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from client_api_fakes import FakeClock

from relayflow.emulators.client_api.app import create_app


def test_concurrent_same_key_creates_once() -> None:
    app = create_app(clock=FakeClock(), activation_delay_s=1.0)

    def post(_: int) -> tuple[int, str]:
        response = app.test_client().post(
            "/registrations", json={"resource": "acme"}, headers={"Idempotency-Key": "same"}
        )
        return response.status_code, response.get_json()["id"]

    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(post, range(64)))

    assert sorted(status for status, _ in results) == [200] * 63 + [201]
    assert len({registration_id for _, registration_id in results}) == 1
    stats = app.test_client().get("/stats").get_json()
    assert stats["side_effects"]["registrations_created"] == 1
    assert stats["idempotent_replays"] == 63

"""Fixtures for the fake order dependencies: a Flask test client with a fake clock and rand."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient
from orders_api_fakes import LABEL_DELAY_S, FakeClock, FakeSleep

from relayflow.emulators.orders_api.app import create_app


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def slept() -> FakeSleep:
    return FakeSleep()


@pytest.fixture
def rolls() -> list[float]:
    """Values the random source returns, in order (then 0.5 forever)."""
    return []


@pytest.fixture
def client(clock: FakeClock, slept: FakeSleep, rolls: list[float]) -> FlaskClient:
    def rand() -> float:
        return rolls.pop(0) if rolls else 0.5

    app = create_app(clock=clock, label_delay_s=LABEL_DELAY_S, sleep=slept, rand=rand)
    return app.test_client()

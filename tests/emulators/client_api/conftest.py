"""Fixtures for the fake client API: a Flask test client over an app with a fake clock."""

from __future__ import annotations

import pytest
from client_api_fakes import FakeClock, FakeSleep
from flask.testing import FlaskClient

from relayflow.emulators.client_api.app import create_app

ACTIVATION_DELAY_S = 2.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def slept() -> FakeSleep:
    return FakeSleep()


@pytest.fixture
def rolls() -> list[float]:
    """Values the fault injector's random source returns, in order (then 0.5 forever)."""
    return []


@pytest.fixture
def client(clock: FakeClock, slept: FakeSleep, rolls: list[float]) -> FlaskClient:
    def rand() -> float:
        return rolls.pop(0) if rolls else 0.5

    app = create_app(clock=clock, activation_delay_s=ACTIVATION_DELAY_S, sleep=slept, rand=rand)
    return app.test_client()

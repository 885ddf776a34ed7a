"""A schedule on the local stack (tests/e2e/apps/schedule_app.py, on a stack of its own at port
block +1100): the local scheduler (the sweeper process, ticking every half second here) runs
the tick job on a clock the test moves by writing the stack's clock file, so an hourly
schedule fires without anyone waiting an hour; paused, its next tick starts nothing; resumed,
the one after does. No test sleeps: it polls the api until each thing is seen."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests

from relayflow.core.schedules import flow_id_of
from relayflow.local.clock import CLOCK_FILE, OffsetClock
from relayflow.local.polling import poll_until
from relayflow.local.ports import HOST, Ports
from relayflow.local.stack import Stack
from tests.conftest import TEST_BASE_PORT

APPS = Path(__file__).resolve().parent / "apps"
PORTS = Ports(TEST_BASE_PORT + 1100)
API = f"http://{HOST}:{PORTS.api}"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    path = os.pathsep.join(p for p in (str(APPS), os.environ.get("PYTHONPATH", "")) if p)
    stack = Stack(
        ports=PORTS,
        state_dir=tmp_path_factory.mktemp("schedules-stack"),
        components=("emulators", "worker", "api", "sweeper"),  # what a tick and its flow use
        app="schedule_app:registry",
        app_path=APPS,
        sweep_interval_s=0.5,
        # One index shard: the sweeper between two ticks asks every shard, 128 by default.
        base_env={**os.environ, "PYTHONPATH": path, "RELAYFLOW_FIRESTORE_SHARDS": "1"},
    )
    stack.up()
    try:
        yield stack
    finally:
        stack.down()


def schedule() -> dict[str, Any]:
    (found,) = requests.get(f"{API}/schedules", timeout=10).json()["schedules"]
    return dict(found)


def flow_status(flow_id: str) -> str | None:
    response = requests.get(f"{API}/flows/{flow_id}", timeout=10)
    return str(response.json()["status"]) if response.status_code == 200 else None


def move_to(clock: OffsetClock, at: datetime) -> None:
    """Move the local scheduler's clock to ``at`` (from the wall clock's now)."""
    clock.set_offset((at - datetime.now(UTC)).total_seconds())


def handled_past(tick: datetime) -> bool:
    handled = schedule()["handled_to"]
    return handled is not None and datetime.fromisoformat(handled) >= tick


def act(action: str) -> None:
    url = f"{API}/schedules/e2e-hourly:{action}"
    response = requests.post(url, json={"reason": f"e2e {action}"}, timeout=10)
    assert response.status_code == 200, response.text


def test_a_schedule_fires_on_the_driven_clock_and_pause_stops_it(stack: Stack) -> None:
    clock = OffsetClock(stack.state_dir / CLOCK_FILE)
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(hours=2)
    # Given the scheduler's clock just past a tick (the first tick run starts it: on time) ...
    move_to(clock, hour + timedelta(seconds=20))
    first = flow_id_of("e2e-hourly", hour)
    assert poll_until(lambda: flow_status(first) == "SUCCEEDED", timeout_s=60, interval_s=0.2)
    # ... when paused, the next tick starts nothing (the tick run records it handled) ...
    act("pause")
    assert schedule()["paused"] is True
    move_to(clock, hour + timedelta(hours=1, seconds=20))
    assert poll_until(lambda: handled_past(hour + timedelta(hours=1)), timeout_s=30, interval_s=0.2)
    assert flow_status(flow_id_of("e2e-hourly", hour + timedelta(hours=1))) is None
    assert schedule()["missed"] >= 1
    # ... and resumed, the one after starts again, the paused one not caught up.
    act("resume")
    move_to(clock, hour + timedelta(hours=2, seconds=20))
    second = flow_id_of("e2e-hourly", hour + timedelta(hours=2))
    assert poll_until(lambda: flow_status(second) == "SUCCEEDED", timeout_s=60, interval_s=0.2)
    assert flow_status(flow_id_of("e2e-hourly", hour + timedelta(hours=1))) is None
    runs = [run["flow_id"] for run in schedule()["runs"]]
    assert runs == [second, first]

"""``POST /schedules/tick`` on the worker: it runs the tick job; a ``now`` drives its clock only
where no token is checked (the local stack), and a bad one is a 400."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from relayflow import ActionStep, Flow, Registry, Schedule
from relayflow.runtime import Runtime
from relayflow.settings import Settings
from relayflow.telemetry import Counters
from relayflow.testing import Harness
from relayflow.topology import load_topology
from relayflow.web.services import SCHEDULES_TICK_PATH, task_app

FLOW = Flow(name="reconcile", steps=(ActionStep("work", lambda ctx: {}),))
REGISTRY = Registry((FLOW,), schedules=(Schedule("nightly", "reconcile", "0 2 * * *"),))


def worker(*, verify_tokens: bool) -> tuple[Harness, Any]:
    h = Harness(REGISTRY, start=datetime(2026, 12, 3, 1, 0, tzinfo=UTC))
    runtime = Runtime(
        Settings(verify_tokens=verify_tokens),
        load_topology(),
        h.engine,
        h.store,  # type: ignore[arg-type]
        Counters(),
        registry=REGISTRY,
        clock=h.clock,
        schedule_states=h.schedule_states,
    )
    return h, task_app(runtime, route="/tasks/step", verifier=None).test_client()


def test_a_local_tick_runs_as_of_the_now_it_is_given() -> None:
    h, client = worker(verify_tokens=False)
    response = client.post(SCHEDULES_TICK_PATH, json={"now": "2026-12-03T02:00:30+00:00"})
    assert response.status_code == 200
    assert response.get_json()["started"] == ["sched-nightly-20261203T0200Z"]
    assert client.post(SCHEDULES_TICK_PATH).get_json()["started"] == []  # the clock's: 01:00
    assert h.started_by("nightly") == ["sched-nightly-20261203T0200Z"]


@pytest.mark.parametrize("now", ["soon", "2026-12-03T02:00:30", 7])
def test_a_bad_now_is_a_400_and_starts_nothing(now: object) -> None:
    h, client = worker(verify_tokens=False)
    response = client.post(SCHEDULES_TICK_PATH, json={"now": now})
    assert response.status_code == 400
    assert "now: an ISO 8601 time with its offset" in response.get_json()["error"]["message"]
    assert h.started_by("nightly") == []


def test_a_deployment_ignores_a_now_and_ticks_on_its_clock() -> None:
    h, client = worker(verify_tokens=True)
    response = client.post(SCHEDULES_TICK_PATH, json={"now": "2026-12-03T02:00:30+00:00"})
    assert response.status_code == 200 and response.get_json()["started"] == []
    assert h.started_by("nightly") == []

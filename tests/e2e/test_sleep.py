"""A Sleep step on the local stack (bench/sleep_app.py, on a stack of its own at port block
+800): while it sleeps the api shows when it wakes and the flow holds one task, due then; at
its wake time it goes on. No test sleeps: it polls the api and the store until done."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import requests
from google.cloud import firestore

from relayflow.core.state import Status
from relayflow.gcp.events import Events, build_publisher
from relayflow.gcp.store import FlowStore
from relayflow.local.environment import relayflow_env
from relayflow.local.polling import poll_until
from relayflow.local.ports import HOST, Ports
from relayflow.local.stack import Stack
from tests.conftest import TEST_BASE_PORT

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
PORTS = Ports(TEST_BASE_PORT + 800)
PROJECT = "relayflow-local"


@pytest.fixture(scope="module")
def sleep_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    path = os.pathsep.join(p for p in (str(BENCH), os.environ.get("PYTHONPATH", "")) if p)
    stack = Stack(
        ports=PORTS,
        state_dir=tmp_path_factory.mktemp("sleep-stack"),
        app="sleep_app:registry",
        app_path=BENCH,
        sweep_interval_s=0,
        base_env={**os.environ, "PYTHONPATH": path},
    )
    stack.up()
    try:
        yield stack
    finally:
        stack.down()


@pytest.fixture
def env(sleep_stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in relayflow_env(PORTS, app="sleep_app:registry").items():
        monkeypatch.setenv(name, value)


def get_flow(flow_id: str) -> dict[str, Any]:
    response = requests.get(f"http://{HOST}:{PORTS.api}/flows/{flow_id}", timeout=10)
    return dict(response.json()) if response.status_code == 200 else {}


def queued_tasks() -> int:
    stats = requests.get(f"http://{HOST}:{PORTS.cloud_tasks_rest}/stats", timeout=10).json()
    return int(stats["queued"]) + int(stats["in_flight"])


@pytest.mark.usefixtures("env")
def test_a_short_sleep_shows_its_wake_time_holds_one_task_and_completes() -> None:
    flow_id = f"nap-{uuid.uuid4().hex[:10]}"
    body = {"flow": "sleeper", "flow_id": flow_id, "input": {"seconds": 3}}
    Events(build_publisher(), project=PROJECT).publish("flow-requests", body)
    seen: list[dict[str, Any]] = []

    def sleeping() -> bool:
        doc = get_flow(flow_id)
        if (doc.get("tracks") or {}).get("nap", {}).get("wake_at"):
            seen.append(doc)
            return True
        return False

    # 3 s asleep, looked at every 0.1 s: the api is seen saying when it wakes
    assert poll_until(sleeping, timeout_s=60, interval_s=0.1), "the flow never slept"
    store = FlowStore(firestore.Client(project=PROJECT))
    doc = seen[0]
    wake = datetime.fromisoformat(doc["tracks"]["nap"]["wake_at"])
    assert datetime.fromisoformat(doc["next_run_at"]) == wake
    assert doc["position"]["kind"] == "sleep" and doc["position"]["poll"] == 1
    assert queued_tasks() == 1  # the one task, due at the wake time

    def ended() -> bool:
        record = store.get(flow_id)
        return record is not None and record.status is Status.SUCCEEDED

    assert poll_until(ended, timeout_s=60, interval_s=0.2), "the sleep never woke"
    record = store.get(flow_id)
    assert record is not None
    slept_until = datetime.fromisoformat(record.outputs["nap"]["slept_until"])
    assert record.outputs["woke"] == {"slept_until": record.outputs["nap"]["slept_until"]}
    # until is 3 s from when its first task fixed the wake time; slept_s counts from when the
    # step started (that first task's delivery may lag behind it)
    (fixed,) = [e for e in record.history if e.outcome.startswith("sleeping until")]
    assert (slept_until - fixed.at).total_seconds() == pytest.approx(3.0, abs=0.5)
    assert record.outputs["nap"]["slept_s"] >= 3.0
    # it went on at its wake time, not before
    (woke,) = [e for e in record.history if e.outcome == "woke"]
    assert woke.at >= slept_until
    assert json.dumps(record.outputs)  # plain JSON all the way

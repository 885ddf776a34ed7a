"""The whole local stack for end-to-end tests, with short poll and retry policies.

The policies are the production code's, set through the same RELAYFLOW_* variables a deployment
uses; they are only shorter, so a flow that polls a few times ends in seconds.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from google.cloud import firestore
from google.pubsub_v1 import PubsubMessage

from relayflow.core.records import FlowRecord
from relayflow.core.state import TERMINAL
from relayflow.gcp.store import FlowStore
from relayflow.local.clients import publisher_client
from relayflow.local.polling import poll_until
from relayflow.local.ports import HOST, Ports
from relayflow.local.stack import Stack

E2E_BASE_PORT = int(os.environ.get("RELAYFLOW_TEST_BASE_PORT", "18120")) + 200
BENCH_BASE_PORT = E2E_BASE_PORT + 1000  # the block tests/conftest.py names +1200
BENCH = Path(__file__).resolve().parents[2] / "bench"
FAST_POLICIES = {
    "RELAYFLOW_POLL_INITIAL_S": "0.5",
    "RELAYFLOW_POLL_MULTIPLIER": "2",
    "RELAYFLOW_POLL_MAX_INTERVAL_S": "2",
    "RELAYFLOW_RETRY_INITIAL_S": "0.2",
    "RELAYFLOW_RETRY_MAX_INTERVAL_S": "1",
    "RELAYFLOW_RETRY_MAX_ATTEMPTS": "4",
    "RELAYFLOW_SWEEP_GRACE_S": "1",
    # Poll chains of 3 (not 20): a poll step writes its document every third poll, so the
    # tests see checkpoints, and a chain the sweeper must rescue is due within seconds.
    "RELAYFLOW_POLL_CHAIN": "3",
    # A clean-up tries again within 2 s (not an hour), and a step a killed worker held is
    # taken over after 15 s (not the 150 s a 120 s dispatch deadline needs).
    "RELAYFLOW_UNDO_INITIAL_S": "0.5",
    "RELAYFLOW_UNDO_MAX_INTERVAL_S": "2",
    "RELAYFLOW_CLAIM_LEASE_S": "15",
    "RELAYFLOW_HANDLER_BUDGET_S": "10",
    # Tenants only the protection tests use: a quota of 2, and a high-priority one.
    "RELAYFLOW_TENANTS": json.dumps(
        {
            "tenants": {
                "e2e-limited": {"max_running": 2},
                "e2e-high": {"priority": "high"},
                "e2e-paused": {},
            }
        }
    ),
}
PROJECT = "relayflow-local"


@pytest.fixture(scope="session")
def local_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    state_dir = tmp_path_factory.mktemp("e2e-stack")
    # No background sweeper: the recovery tests sweep by hand and count what it did.
    stack = Stack(
        ports=Ports(E2E_BASE_PORT),
        state_dir=state_dir,
        base_env={**os.environ, **FAST_POLICIES},
        sweep_interval_s=0,
    )
    stack.up()
    try:
        yield stack
    finally:
        stack.down()


@pytest.fixture(scope="session")
def bench_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A second whole stack, running bench/e2e_app.py: the child flows of
    bench/children_app.py and the payload flows of bench/offload_app.py (one stack for both:
    each stack costs seconds of CI)."""
    path = os.pathsep.join(p for p in (str(BENCH), os.environ.get("PYTHONPATH", "")) if p)
    stack = Stack(
        ports=Ports(BENCH_BASE_PORT),
        state_dir=tmp_path_factory.mktemp("bench-stack"),
        app="e2e_app:registry",
        app_path=BENCH,
        sweep_interval_s=0,
        base_env={**os.environ, "PYTHONPATH": path},
    )
    stack.up()
    try:
        yield stack
    finally:
        stack.down()


@dataclass
class Harness:
    """The handles an end-to-end test uses: publish, read flows, talk to the services."""

    stack: Stack
    store: FlowStore
    db: firestore.Client

    @property
    def ports(self) -> Ports:
        return self.stack.ports

    def url(self, port: int, path: str) -> str:
        return f"http://{HOST}:{port}{path}"

    def publish(
        self, body: dict[str, Any] | bytes, *, topic: str = "flow-requests", **attributes: str
    ) -> str:
        """Publish a start message on ``topic`` (a tenant's own: ``flow-requests.{tenant}``)."""
        import json

        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        client = publisher_client(f"{HOST}:{self.ports.pubsub}")
        topic = client.topic_path(PROJECT, topic)
        response = client.publish(
            topic=topic, messages=[PubsubMessage(data=data, attributes=attributes)]
        )
        return str(response.message_ids[0])

    def flow(self, flow_id: str) -> FlowRecord | None:
        """The flow with that id, whichever tenant's it is (ids are each tenant's own)."""
        found = self.store.get(flow_id) or next(iter(self.store.find(flow_id)), None)
        return found

    def polls_shown(self, flow_id: str) -> int:
        """How many polls the api shows the flow has made: those its document records and
        those its poll chain carries, not yet written (``polls_in_flight``)."""
        shown = requests.get(self.url(self.ports.api, f"/flows/{flow_id}"), timeout=10)
        if not shown.ok:
            return 0
        doc = shown.json()
        return int(doc.get("polls") or 0) + len(doc.get("polls_in_flight") or [])

    def wait_terminal(self, flow_id: str, timeout_s: float = 60.0) -> FlowRecord:
        found: list[FlowRecord] = []

        def ended() -> bool:
            record = self.flow(flow_id)
            if record is not None and record.status in TERMINAL and record.result_published:
                found.append(record)
                return True
            return False

        assert poll_until(ended, timeout_s=timeout_s, interval_s=0.2), f"{flow_id} did not end"
        return found[0]

    def client_api(self, method: str, path: str, **kwargs: Any) -> Any:
        response = requests.request(
            method, self.url(self.ports.client_api, path), timeout=10, **kwargs
        )
        response.raise_for_status()
        return response.json()

    def side_effects(self) -> dict[str, int]:
        return dict(self.client_api("GET", "/stats")["side_effects"])


@pytest.fixture
def harness(local_stack: Stack, emulator_env: dict[str, str]) -> Iterator[Harness]:
    """A harness on a stack whose fake client API has no faults and default timing."""
    db = firestore.Client(project=PROJECT)
    store = FlowStore(db)
    h = Harness(local_stack, store, db)
    h.client_api("DELETE", "/admin/faults")
    yield h
    h.client_api("DELETE", "/admin/faults")


@pytest.fixture
def new_id() -> Callable[[str], str]:
    """Unique flow ids per test: Cloud Tasks names are never reused, so neither are flows."""
    return lambda prefix: f"{prefix}-{uuid.uuid4().hex[:10]}"

"""At-least-once delivery, effectively-once effects: a stack whose Cloud Tasks delivers every
task twice still registers each resource once and records each position once."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator

import pytest
import requests
from google.cloud import firestore

from relayflow.core.state import Status
from relayflow.gcp.store import FlowStore
from relayflow.local.ports import HOST, Ports
from relayflow.local.stack import Stack
from tests.e2e.conftest import E2E_BASE_PORT, FAST_POLICIES, Harness

pytestmark = pytest.mark.e2e
FLOWS = 8


@pytest.fixture(scope="module")
def doubled_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A second whole stack whose Cloud Tasks emulator delivers each task twice."""
    stack = Stack(
        ports=Ports(E2E_BASE_PORT + 300),
        state_dir=tmp_path_factory.mktemp("doubled-stack"),
        base_env={**os.environ, **FAST_POLICIES},
        duplicate_rate=1.0,
    )
    stack.up()
    try:
        yield stack
    finally:
        stack.down()


def test_every_task_delivered_twice_still_gives_one_effect_per_step(
    doubled_stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in doubled_stack.env().items():
        monkeypatch.setenv(name, value)
    db = firestore.Client(project="relayflow-local")
    harness = Harness(doubled_stack, FlowStore(db), db)
    ports = doubled_stack.ports
    before = harness.side_effects()
    tasks_before = _tasks_stats(ports)

    # given a batch of flows, each of whose tasks Cloud Tasks delivers twice
    ids = [f"dup-{i}" for i in range(FLOWS)]
    for flow_id in ids:
        harness.publish(
            {"flow": "registration", "flow_id": flow_id, "input": {"resource": flow_id}}
        )

    # when they all end
    records = [harness.wait_terminal(flow_id) for flow_id in ids]

    # then every flow succeeded with exactly one registration and one entity each, every
    # position appears once in its history, and the duplicates really were delivered
    assert all(r.status is Status.SUCCEEDED for r in records)
    after = harness.side_effects()
    assert after["registrations_created"] - before["registrations_created"] == FLOWS
    assert after["entities_created"] - before["entities_created"] == FLOWS
    for record in records:
        positions = Counter((h.step, h.kind, h.attempt, h.poll) for h in record.history)
        assert max(positions.values()) == 1, positions
    tasks_after = _tasks_stats(ports)
    # (every task created for these flows was delivered a second time; at least two per flow,
    # the registration and a poll: the step after the last poll may run in the poll's request)
    created = tasks_after["created"] - tasks_before["created"]
    duplicated = tasks_after["duplicated"] - tasks_before["duplicated"]
    assert duplicated >= created >= 2 * FLOWS


def test_every_task_delivered_twice_in_a_flow_of_every_shape_changes_nothing(
    doubled_stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in doubled_stack.env().items():
        monkeypatch.setenv(name, value)
    db = firestore.Client(project="relayflow-local")
    harness = Harness(doubled_stack, FlowStore(db), db)
    before = harness.side_effects()
    # given a fleet (ForEach of callback steps, an If, a join) whose tasks all come twice
    resources = [f"dupfleet-{i}" for i in range(6)]
    body = {"flow": "fleet", "flow_id": "dupfleet", "input": {"resources": resources}}
    harness.publish(body)
    record = harness.wait_terminal("dupfleet", timeout_s=120)
    # then one registration per resource, one group entity, and each step once in history
    assert record.status is Status.SUCCEEDED, record.result
    after = harness.side_effects()
    assert after["registrations_created"] - before["registrations_created"] == len(resources)
    assert after["entities_created"] - before["entities_created"] == 1
    steps = Counter((h.step, h.kind) for h in record.history)
    assert steps[("create_group", "action")] == 1 and steps[("enough", "choice")] == 1


def _tasks_stats(ports: Ports) -> dict[str, int]:
    response = requests.get(f"http://{HOST}:{ports.cloud_tasks_rest}/stats", timeout=10)
    response.raise_for_status()
    return {k: v for k, v in response.json().items() if isinstance(v, int)}

"""Flows on a local stack whose queues have shards: every shard is provisioned, each flow's
tasks all run on its own shard, and the flows succeed as on one queue per kind."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest
import requests

from relayflow.core.sharding import shard_of
from relayflow.local.clients import tasks_client
from relayflow.local.ports import HOST, Ports
from relayflow.local.provision import queue_path
from relayflow.local.stack import Stack
from tests.e2e.conftest import FAST_POLICIES, Harness

pytestmark = pytest.mark.e2e

SHARDS = 3
SHARDED_BASE_PORT = int(os.environ.get("RELAYFLOW_TEST_BASE_PORT", "18120")) + 800


@pytest.fixture(scope="module")
def local_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The e2e stack, with SHARDS queues of each kind (overrides the session's one-shard stack
    for this module only)."""
    stack = Stack(
        ports=Ports(SHARDED_BASE_PORT),
        state_dir=tmp_path_factory.mktemp("sharded-stack"),
        base_env={**os.environ, **FAST_POLICIES},
        sweep_interval_s=0,
        queue_shards=SHARDS,
    )
    stack.up()
    try:
        yield stack
    finally:
        stack.down()


def _dispatched(stack: Stack) -> dict[str, int]:
    url = f"http://{HOST}:{stack.ports.cloud_tasks_rest}/stats"
    counts: dict[str, int] = requests.get(url, timeout=10).json()["dispatched_by_queue"]
    return counts


def test_every_shard_is_provisioned(local_stack: Stack) -> None:
    assert local_stack.env()["RELAYFLOW_QUEUE_SHARDS"] == str(SHARDS)
    with tasks_client(local_stack.env()["CLOUD_TASKS_EMULATOR_HOST"]) as client:
        for queue in local_stack.topology().queues.provisioned():
            assert client.get_queue(name=queue_path(queue.name)).name.endswith(queue.name)
    assert len(local_stack.topology().queues.provisioned()) == 4 * SHARDS


def test_flows_run_each_on_its_own_shard(harness: Harness, new_id: Callable[[str], str]) -> None:
    before = _dispatched(harness.stack)
    ids = [new_id("sharded") for _ in range(6)]
    for flow_id in ids:
        body = {"flow": "registration", "flow_id": flow_id, "input": {"resource": flow_id}}
        harness.publish(body)
    records = [harness.wait_terminal(flow_id) for flow_id in ids]
    assert [r.status.value for r in records] == ["SUCCEEDED"] * len(ids)
    shards = {r.flow_id: r.queue_shard for r in records}
    assert shards == {flow_id: shard_of(flow_id, SHARDS) for flow_id in ids}
    # Every task dispatched went to a shard one of these flows is on, steps and polls alike.
    after = _dispatched(harness.stack)
    used = {q for q, n in after.items() if n > before.get(q, 0)}
    expected = {
        name if shard == 0 else f"{name}-{shard}"
        for shard in set(shards.values())
        for name in ("flow-steps", "flow-polls")
    }
    assert {q for q in used if q.startswith("flow-steps")} <= expected
    assert {q for q in used if q.startswith("flow-polls")} <= expected
    assert any(q.startswith("flow-polls") for q in used)
    # Each flow's history shows every step: the shard changed where, not what, it ran.
    assert all(r.outputs for r in records)

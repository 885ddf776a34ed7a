"""The Node example (examples/node) on the local stack: a service written in another language
starts a flow with the official ``@google-cloud/pubsub`` client and reads its result event,
both checked against relayflow's published JSON Schemas.

Its ``node_modules`` come from ``npm ci --prefix examples/node`` (``.ci/run`` does it).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from google.cloud.pubsub_v1 import SubscriberClient

from relayflow.core.state import Status
from relayflow.local.clients import subscriber_client
from tests.e2e.conftest import PROJECT, Harness
from tests.integration.support import pull

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "node"


def node(harness: Harness, *args: str) -> subprocess.CompletedProcess[str]:
    assert shutil.which("node"), "the Node example needs node (and npm ci --prefix examples/node)"
    assert (EXAMPLE / "node_modules" / "@google-cloud" / "pubsub").is_dir(), (
        "run npm ci --prefix examples/node first"
    )
    env = {
        **os.environ,
        "PUBSUB_EMULATOR_HOST": f"127.0.0.1:{harness.ports.pubsub}",
        "GOOGLE_CLOUD_PROJECT": PROJECT,
        "RELAYFLOW_TIMEOUT_S": "90",
    }
    return subprocess.run(
        ["node", "start-and-wait.mjs", *args],
        cwd=EXAMPLE,
        env=env,
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )


def test_node_starts_a_flow_and_reads_its_result_event(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    flow_id = new_id("node")
    done = node(harness, "registration", json.dumps({"resource": flow_id}), flow_id)

    assert done.returncode == 0, done.stderr
    event = json.loads(done.stdout)
    assert (event["flow_id"], event["status"], event["event"]) == (flow_id, "SUCCEEDED", "result")
    record = harness.wait_terminal(flow_id)
    assert record.status is Status.SUCCEEDED and record.result is not None
    assert event["data"] == record.result.data


def test_node_refuses_a_start_message_the_schema_rejects_and_publishes_nothing(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    flow_id = new_id("node-bad")
    with watching(harness, "flow-requests") as watched:
        done = node(harness, "registration", '["not", "an object"]', flow_id)
        published = pull(subscriber(harness), watched, count=1, timeout_s=2.0)

    assert done.returncode == 1
    assert "the start message would be rejected: /input must be object" in done.stderr
    assert "nothing was published" in done.stderr
    assert published == []


@contextlib.contextmanager
def watching(harness: Harness, topic: str) -> Iterator[str]:
    """A pull subscription of the test's own on ``topic`` while the block runs: what is
    published there meanwhile, the test can pull."""
    client = subscriber(harness)
    path = client.subscription_path(PROJECT, f"watch-{uuid.uuid4().hex[:10]}")
    client.create_subscription(name=path, topic=f"projects/{PROJECT}/topics/{topic}")
    try:
        yield path
    finally:
        client.delete_subscription(subscription=path)


def subscriber(harness: Harness) -> SubscriberClient:
    return subscriber_client(f"127.0.0.1:{harness.ports.pubsub}")

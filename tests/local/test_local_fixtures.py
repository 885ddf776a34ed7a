"""The session stacks the other tests use: reachable, wired together, usable from a shell."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import requests

from relayflow.local.clients import publisher_client, subscriber_client
from relayflow.local.environment import PROJECT_ID
from relayflow.local.polling import poll_until
from relayflow.local.stack import Stack


def _session() -> requests.Session:
    session = requests.Session()
    session.trust_env = False
    return session


@pytest.mark.emulators
def test_emulators_env_names_the_four_emulators(emulators: Stack) -> None:
    env = emulators.env()

    assert env["PUBSUB_EMULATOR_HOST"] == f"127.0.0.1:{emulators.ports.pubsub}"
    assert env["FIRESTORE_EMULATOR_HOST"] == f"127.0.0.1:{emulators.ports.firestore}"
    assert env["CLOUD_TASKS_EMULATOR_HOST"] == f"127.0.0.1:{emulators.ports.cloud_tasks_grpc}"
    assert env["STORAGE_EMULATOR_HOST"] == f"http://127.0.0.1:{emulators.ports.storage}"
    names = [row.name for row in emulators.status()]
    assert names == ["pubsub", "firestore", "cloud_tasks", "storage"]
    assert all(row.healthy for row in emulators.status())


@pytest.mark.emulators
def test_emulator_env_fixture_sets_os_environ(emulator_env: dict[str, str]) -> None:
    assert os.environ["FIRESTORE_EMULATOR_HOST"] == emulator_env["FIRESTORE_EMULATOR_HOST"]


@pytest.mark.emulators
def test_gcloud_publishes_after_sourcing_the_env_file(emulators: Stack) -> None:
    marker = uuid.uuid4().hex
    subprocess.run(
        ["bash", "-c", f'source "{emulators.env_file}" && '
         f"gcloud pubsub topics publish flow-results --message={marker} --quiet"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip

    host = emulators.env()["PUBSUB_EMULATOR_HOST"]
    subscription = f"projects/{PROJECT_ID}/subscriptions/flow-results-hold"
    seen: list[bytes] = []
    with subscriber_client(host) as subscriber:

        def pulled() -> bool:
            response = subscriber.pull(subscription=subscription, max_messages=10, timeout=5)
            seen.extend(m.message.data for m in response.received_messages)
            ack_ids = [m.ack_id for m in response.received_messages]
            if ack_ids:
                subscriber.acknowledge(subscription=subscription, ack_ids=ack_ids)
            return marker.encode() in seen

        assert poll_until(pulled, timeout_s=30)


@pytest.mark.e2e
def test_local_stack_starts_a_flow_from_a_published_message(local_stack: Stack) -> None:
    assert all(row.healthy for row in local_stack.status())
    flow_id = f"smoke-{uuid.uuid4().hex[:12]}"
    message = {"flow": "registration", "input": {"resource": "acme"}, "flow_id": flow_id}
    with publisher_client(local_stack.env()["PUBSUB_EMULATOR_HOST"]) as publisher:
        publisher.publish(
            topic=f"projects/{PROJECT_ID}/topics/flow-requests",
            messages=[{"data": json.dumps(message).encode()}],
        )

    api = f"http://127.0.0.1:{local_stack.ports.api}/flows/{flow_id}"
    session = _session()
    found = poll_until(lambda: session.get(api, timeout=10).status_code == 200, timeout_s=120)
    log = local_stack.log_path("start_function").read_text(encoding="utf-8")
    assert found, f"flow {flow_id} never appeared; start_function.log:\n{log[-3000:]}"


@pytest.mark.emulators
def test_the_env_file_puts_the_relayflow_command_on_the_path(emulators: Stack) -> None:
    # given a shell whose PATH does not have the venv
    found = subprocess.run(
        ["bash", "-c", f'export PATH=/usr/bin:/bin; source "{emulators.env_file}" && '
         "command -v relayflow"],
        check=True, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    # then sourcing the env file is enough to run `relayflow`
    assert found.stdout.strip() == str(Path(sys.executable).parent / "relayflow")

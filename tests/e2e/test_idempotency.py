"""Duplicates everywhere, effects once: re-published messages, redelivered pushes, stale tasks."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
import requests
from google.api_core.exceptions import NotFound

from relayflow.core.ports import Enqueued
from relayflow.core.position import TaskKind
from relayflow.core.records import NextTask
from relayflow.core.state import Status
from relayflow.gcp.queue import TaskQueue
from relayflow.local.clients import tasks_client
from relayflow.local.polling import poll_until
from relayflow.local.ports import HOST
from relayflow.runtime import task_targets
from relayflow.settings import load_settings
from relayflow.topology import load_topology
from tests.e2e.conftest import PROJECT, Harness

pytestmark = pytest.mark.e2e


def test_the_same_message_published_twice_gives_one_flow_and_one_registration(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    # given one start message with a flow id, published twice (two Pub/Sub messages)
    flow_id = new_id("twice")
    body = {"flow": "registration", "flow_id": flow_id, "input": {"resource": flow_id}}
    before = harness.side_effects()
    published = {harness.publish(body), harness.publish(body)}

    # when the flow ends
    record = harness.wait_terminal(flow_id)

    # then there is one flow and one registration. The flow is started by whichever message
    # was taken first: Pub/Sub pushes the two side by side, in no promised order.
    assert record.status is Status.SUCCEEDED
    assert len(published) == 2 and record.message_id in published
    after = harness.side_effects()
    assert after["registrations_created"] - before["registrations_created"] == 1
    assert after["entities_created"] - before["entities_created"] == 1
    assert sum(1 for h in record.history if h.step == "register") == 1


def test_a_redelivered_push_starts_nothing_new(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    # given a push body, as the Pub/Sub emulator sends it, delivered twice with one message id
    message_id = new_id("push")
    data = {"flow": "registration", "input": {"resource": message_id}}
    push = {
        "subscription": f"projects/{PROJECT}/subscriptions/flow-requests-start",
        "message": {
            "data": base64.b64encode(json.dumps(data).encode()).decode(),
            "attributes": {},
            "messageId": message_id,
            "message_id": message_id,
            "publishTime": datetime.now(UTC).isoformat(),
            "publish_time": datetime.now(UTC).isoformat(),
        },
    }
    url = harness.url(harness.ports.start_function, f"/projects/{PROJECT}/topics/flow-requests")
    before = harness.side_effects()

    # when both deliveries reach the start function
    for _ in range(2):
        response = requests.post(url, json=push, timeout=30)
        assert response.ok, response.text

    # then one flow ran, under the message id, with one registration
    record = harness.wait_terminal(message_id)
    assert record.status is Status.SUCCEEDED
    after = harness.side_effects()
    assert after["registrations_created"] - before["registrations_created"] == 1


def test_a_stale_task_is_a_no_op(harness: Harness, new_id: Callable[[str], str]) -> None:
    # given a flow that has succeeded
    flow_id = new_id("stale")
    harness.publish({"flow": "registration", "flow_id": flow_id, "input": {"resource": flow_id}})
    done = harness.wait_terminal(flow_id)
    register = next(h for h in done.history if h.step == "register")
    before = harness.side_effects()

    # when Cloud Tasks delivers a task for its first position again (under a fresh name, as a
    # duplicate delivery would), with a valid OIDC token
    settings = load_settings()
    client = tasks_client(f"{HOST}:{harness.ports.cloud_tasks_grpc}")
    queue = TaskQueue(
        client,
        project=PROJECT,
        location=settings.location,
        targets=task_targets(settings, load_topology()),
        service_account=settings.tasks_service_account,
    )
    position = done.position.model_copy(
        update={"step_index": 0, "step": register.step, "kind": TaskKind.ACTION, "attempt": 0}
    )
    dup = NextTask(
        queue="flow-steps",
        task_id=f"dup-{flow_id}",
        run_at=datetime.now(UTC),
        position=position,
    )
    assert queue.ensure(flow_id, dup) is Enqueued.CREATED
    name = client.task_path(PROJECT, settings.location, "flow-steps", dup.task_id)

    def delivered() -> bool:
        try:
            client.get_task(name=name)
        except NotFound:
            return True  # a task is deleted once its target answered 2xx
        return False

    assert poll_until(delivered, timeout_s=20)

    # then the task succeeded without touching the flow or the client API
    after = harness.store.get(flow_id)
    assert after is not None
    assert after.updated_at == done.updated_at
    assert after.history == done.history
    assert harness.side_effects() == before


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer not-a-jwt", "Basic dXNlcjpwYXNz"],
    ids=["no-token", "garbage-token", "wrong-scheme"],
)
def test_task_endpoints_refuse_requests_without_a_valid_token(
    harness: Harness, authorization: str | None
) -> None:
    headers = {"Authorization": authorization} if authorization else {}
    for port, path in (
        (harness.ports.worker, "/tasks/step"),
        (harness.ports.poller, "/tasks/poll"),
    ):
        response = requests.post(harness.url(port, path), data=b"{}", headers=headers, timeout=10)
        assert response.status_code == 401
        assert response.json()["error"]["status"] == "UNAUTHENTICATED"

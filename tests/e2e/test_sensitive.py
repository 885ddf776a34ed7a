"""Sensitive fields on the whole local stack: the raw bytes a payment flow leaves in Firestore,
in every Cloud Tasks body it made and in its result message on Pub/Sub hold none of its
sensitive values (the card's number and code, the token its handler made); its handlers saw
them in clear; the api shows them redacted; a client holding the stack's key opens them.

Every task body is read before it runs: the queues are paused (a paused queue keeps its tasks)
and each of the flow's tasks is listed with its body (the FULL view), then run at once
(RunTask dispatches from a paused queue), until the flow has ended.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest
import requests
from google.cloud import tasks_v2

from relayflow.client import Client
from relayflow.client.waiters import FlowResult
from relayflow.core.sealing import is_sealed
from relayflow.core.state import TERMINAL, Status
from relayflow.local.clients import subscriber_client, tasks_client
from relayflow.local.polling import poll_until
from relayflow.local.ports import HOST
from relayflow.local.provision import LOCATION
from tests.e2e.conftest import PROJECT, Harness
from tests.leaks import holds

pytestmark = pytest.mark.e2e

CARD, CVC = "4111111111111111", "737"
INPUT = {"customer": "c-1", "amount_cents": 1250, "card": {"number": CARD, "cvc": CVC}}


@pytest.fixture
def paused(harness: Harness) -> Iterator[tuple[tasks_v2.CloudTasksClient, list[str]]]:
    """Every queue of the stack paused for the test, resumed after it."""
    client = tasks_client(f"{HOST}:{harness.ports.cloud_tasks_grpc}")
    queues = harness.stack.topology().queues
    kinds = (queues.steps, queues.polls, queues.steps_high, queues.polls_high)
    names = [
        client.queue_path(PROJECT, LOCATION, shard.name)
        for kind in kinds
        if kind is not None
        for shard in kind.shard_queues()
    ]
    for name in names:
        client.pause_queue(name=name)
    try:
        yield client, names
    finally:
        for name in names:
            client.resume_queue(name=name)


def test_a_runs_raw_bytes_hold_none_of_its_sensitive_values(
    harness: Harness,
    paused: tuple[tasks_v2.CloudTasksClient, list[str]],
    new_id: Callable[[str], str],
) -> None:
    # given a subscription on flow-results, and the queues paused
    subscriber = subscriber_client(f"{HOST}:{harness.ports.pubsub}")
    results = subscriber.subscription_path(PROJECT, new_id("sensitive-results"))
    subscriber.create_subscription(name=results, topic=f"projects/{PROJECT}/topics/flow-results")
    client, queues = paused

    # when a payment flow runs, each of its tasks read (with its body) before it runs
    flow_id = new_id("pay")
    harness.publish({"flow": "payment", "flow_id": flow_id, "input": INPUT})
    bodies: dict[str, bytes] = {}

    def ran_to_its_end() -> bool:
        for queue in queues:
            listed = client.list_tasks(
                request={"parent": queue, "response_view": tasks_v2.Task.View.FULL}
            )
            for task in listed:
                if flow_id in task.name and task.name not in bodies:
                    bodies[task.name] = task.http_request.body
                    client.run_task(name=task.name)
        record = harness.flow(flow_id)
        return record is not None and record.status in TERMINAL and record.result_published

    assert poll_until(ran_to_its_end, timeout_s=60, interval_s=0.2), f"{flow_id} did not end"
    record = harness.flow(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED, record.result

    # then its result event, opened with the stack's key, is what the handlers made of the
    # card in clear: its last four digits, and a token (sealed in the event)
    event = _result_event(subscriber, results, flow_id)
    assert is_sealed(json.loads(event)["data"]["token"])
    with Client(environ=harness.stack.env()) as opener:
        receipt = opener.output_of(FlowResult.from_event(json.loads(event)))
    assert receipt["last4"] == "1111" and receipt["token"].startswith("tok_")
    secrets = (CARD, CVC, receipt["token"])

    # and no byte that left a service holds any of them
    chained = [b for b in bodies.values() if json.loads(b).get("chain")]
    assert len(bodies) >= 3 and chained, bodies  # the steps, and a poll chain's notes
    documents = _raw_documents(harness, "flows") + _raw_documents(harness, "rejected")
    assert flow_id.encode() in documents
    for name, raw in [*bodies.items(), ("firestore", documents), ("flow-results", event)]:
        assert not [s for s in secrets if holds(raw, s)], name

    # and the api shows them redacted (the local caller is no sensitive reader)
    shown = requests.get(f"http://{HOST}:{harness.ports.api}/flows/{flow_id}", timeout=10)
    assert shown.json()["input"]["card"] == {"number": "[redacted]", "cvc": "[redacted]"}
    assert shown.json()["result"]["data"]["token"] == "[redacted]"
    assert not [s for s in secrets if s in shown.text]
    subscriber.delete_subscription(subscription=results)


def _result_event(subscriber: object, subscription: str, flow_id: str) -> bytes:
    """The raw data of ``flow_id``'s result message on ``subscription``."""
    found: list[bytes] = []

    def pulled() -> bool:
        answer = subscriber.pull(  # type: ignore[attr-defined]
            subscription=subscription, max_messages=50, timeout=10
        )
        for received in answer.received_messages:
            if received.message.attributes.get("flow_id") == flow_id:
                found.append(received.message.data)
        if answer.received_messages:
            subscriber.acknowledge(  # type: ignore[attr-defined]
                subscription=subscription, ack_ids=[r.ack_id for r in answer.received_messages]
            )
        return bool(found)

    assert poll_until(pulled, timeout_s=20, interval_s=0.2), f"no result event for {flow_id}"
    return found[0]


def _raw_documents(harness: Harness, collection: str) -> bytes:
    """Every document of ``collection`` as the Firestore emulator's REST API sends it, every
    page of it."""
    url = (
        f"http://{HOST}:{harness.ports.firestore}/v1/projects/{PROJECT}"
        f"/databases/(default)/documents/{collection}"
    )
    pages: list[bytes] = []
    token = ""
    while True:
        answer = requests.get(
            url,
            params={"pageSize": 300, **({"pageToken": token} if token else {})},
            headers={"Authorization": "Bearer owner"},
            timeout=10,
        )
        answer.raise_for_status()
        pages.append(answer.content)
        token = answer.json().get("nextPageToken", "")
        if not token:
            return b"\n".join(pages)

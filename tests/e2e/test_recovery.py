"""Nothing lost: the sweeper rescues a flow whose task vanished; a start that cannot enqueue is
redelivered by Pub/Sub and, after five deliveries, dead-lettered."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests
from google.api_core.exceptions import NotFound
from google.cloud import tasks_v2
from google.pubsub_v1 import DeadLetterPolicy, PubsubMessage, RetryPolicy, Subscription
from google.pubsub_v1.types import PushConfig

from relayflow.core.planner.chain import candidates
from relayflow.core.state import Status
from relayflow.emulators.cloud_tasks.testing import free_ports
from relayflow.local import processes
from relayflow.local.clients import publisher_client, subscriber_client, tasks_client
from relayflow.local.polling import poll_until
from relayflow.local.ports import HOST
from relayflow.settings import load_settings
from relayflow.topology import load_topology
from tests.e2e.conftest import FAST_POLICIES, PROJECT, Harness

pytestmark = pytest.mark.e2e


def _tasks(harness: Harness) -> tasks_v2.CloudTasksClient:
    return tasks_client(f"{HOST}:{harness.ports.cloud_tasks_grpc}")


def test_the_sweeper_rescues_a_flow_whose_next_task_was_lost(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    # given a flow polling a registration that never activates
    flow_id = new_id("lost")
    harness.client_api("POST", "/admin/config", json={"resource_delays": {flow_id: None}})
    body = {"flow": "registration", "flow_id": flow_id, "input": {"resource": flow_id}}
    harness.publish(body)
    # (written once: its chain's first checkpoint)
    assert poll_until(lambda: _polls(harness, flow_id) >= 1, timeout_s=20)

    # when every task its poll chain may have queued since that write disappears (the queue
    # paused so none runs while we take them away)
    client, settings = _tasks(harness), load_settings()
    lost = harness.store.get(flow_id)
    assert lost is not None and lost.next is not None and lost.next_run_at is not None
    polls = client.queue_path(PROJECT, settings.location, lost.next.queue)
    client.pause_queue(name=polls)
    try:
        for task in candidates(lost.key, lost.next, int(FAST_POLICIES["RELAYFLOW_POLL_CHAIN"])):
            name = client.task_path(PROJECT, settings.location, task.queue, task.task_id)
            with contextlib.suppress(NotFound):  # a poll the chain has not made, or has run
                client.delete_task(name=name)
    finally:
        client.resume_queue(name=polls)

    # and the sweep runs (here as a Cloud Task, with the OIDC token Cloud Scheduler would send)
    # once it is overdue by more than the sweep grace the e2e stack runs with: a chain is due
    # when its next write is (its last poll), which the write before it stored
    overdue_at = lost.next_run_at + timedelta(
        seconds=float(FAST_POLICIES["RELAYFLOW_SWEEP_GRACE_S"])
    )
    assert poll_until(lambda: datetime.now(UTC) > overdue_at + timedelta(seconds=0.2), timeout_s=15)
    worker = f"http://{HOST}:{harness.ports.worker}"
    client.create_task(
        parent=client.queue_path(PROJECT, settings.location, "flow-steps"),
        task=tasks_v2.Task(
            http_request=tasks_v2.HttpRequest(
                url=f"{worker}/sweep",
                http_method=tasks_v2.HttpMethod.POST,
                oidc_token=tasks_v2.OidcToken(
                    service_account_email=settings.tasks_service_account, audience=worker
                ),
            )
        ),
    )

    # then the flow gets a fresh task under a new name and keeps polling
    def rescued() -> bool:
        record = harness.store.get(flow_id)
        return record is not None and record.position.rescue == 1 and record.polls > lost.polls

    assert poll_until(rescued, timeout_s=20)
    record = harness.store.get(flow_id)
    assert record is not None and record.status is Status.RUNNING
    assert any(h.outcome == "rescued" for h in record.history)
    cancelled = requests.post(
        f"http://{HOST}:{harness.ports.api}/flows/{flow_id}:cancel", json={}, timeout=10
    )
    assert cancelled.ok, cancelled.text  # tidy: nothing else would end it


def _polls(harness: Harness, flow_id: str) -> int:
    record = harness.store.get(flow_id)
    return record.polls if record else 0


@pytest.fixture
def failing_start_function(harness: Harness, tmp_path: Path) -> Iterator[str]:
    """The real start function, whose Cloud Tasks is unreachable: every start fails after the
    flow doc is written, as when the queue is down. Yields its push URL."""
    port, closed = free_ports(2, HOST)  # distinct: nothing listens on `closed`
    env = {
        **harness.stack.env(),
        "CLOUD_TASKS_EMULATOR_HOST": f"{HOST}:{closed}",
        "PYTHONUNBUFFERED": "1",
    }
    script = Path(sys.executable).with_name("functions-framework")
    argv = [
        str(script),
        "--target",
        "start_flow",
        "--source",
        "relayflow/functions/start_flow/main.py",
    ]
    argv += ["--signature-type", "cloudevent", "--host", HOST, "--port", str(port)]
    popen = processes.spawn(
        argv, env=env, cwd=harness.stack.repo_root, log_path=tmp_path / "fn.log"
    )
    try:
        url = f"http://{HOST}:{port}"
        assert poll_until(lambda: _answers(url), timeout_s=30), (tmp_path / "fn.log").read_text()
        yield f"{url}/projects/{PROJECT}/topics/dlq-probe"
    finally:
        processes.stop_groups([popen.pid], reap=popen.poll)


def _answers(url: str) -> bool:
    try:
        requests.get(url, timeout=1)
    except requests.ConnectionError:
        return False
    return True


def test_a_start_that_keeps_failing_is_dead_lettered_after_five_deliveries(
    harness: Harness, failing_start_function: str, new_id: Callable[[str], str]
) -> None:
    # given a topic pushed to the failing start function with the topology's dead-letter policy
    policy = load_topology().subscriptions.start
    publisher = publisher_client(f"{HOST}:{harness.ports.pubsub}")
    subscriber = subscriber_client(f"{HOST}:{harness.ports.pubsub}")
    run = new_id("dlq")
    topic, dead = (publisher.topic_path(PROJECT, f"{run}-{t}") for t in ("in", "dead"))
    for path in (topic, dead):
        publisher.create_topic(name=path)
    held = subscriber.subscription_path(PROJECT, f"{run}-held")
    subscriber.create_subscription(name=held, topic=dead)
    subscriber.create_subscription(
        request=Subscription(
            name=subscriber.subscription_path(PROJECT, f"{run}-push"),
            topic=topic,
            push_config=PushConfig(push_endpoint=failing_start_function),
            ack_deadline_seconds=policy.ack_deadline_s,
            dead_letter_policy=DeadLetterPolicy(
                dead_letter_topic=dead, max_delivery_attempts=policy.max_delivery_attempts
            ),
            retry_policy=RetryPolicy(
                minimum_backoff={"seconds": 1}, maximum_backoff={"seconds": 1}
            ),
        )
    )

    # when a valid start message is published to it
    data = {"flow": "registration", "flow_id": run, "input": {"resource": run}}
    message = PubsubMessage(data=json.dumps(data).encode())
    publisher.publish(topic=topic, messages=[message])

    # then the function wrote the flow doc but could not enqueue, so it never acked; after
    # max_delivery_attempts (5) deliveries the message is on the dead-letter topic
    received: list[PubsubMessage] = []

    def dead_lettered() -> bool:
        response = subscriber.pull(subscription=held, max_messages=1, timeout=5)
        received.extend(r.message for r in response.received_messages)
        return bool(received)

    assert poll_until(dead_lettered, timeout_s=60)
    assert json.loads(received[0].data) == data
    assert received[0].attributes["CloudPubSubDeadLetterSourceDeliveryCount"] == "5"
    record = harness.store.get(run)
    assert record is not None and record.status is Status.PENDING and record.next is not None
    try:
        _tasks(harness).get_task(
            name=_tasks(harness).task_path(
                PROJECT, load_settings().location, record.next.queue, record.next.task_id
            )
        )
        enqueued = True
    except NotFound:
        enqueued = False
    assert not enqueued  # nothing reached the real queue: the sweeper's case

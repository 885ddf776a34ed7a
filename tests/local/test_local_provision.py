"""Provisioning: the emulators hold the topology's topics, subscriptions and queues."""

from __future__ import annotations

import pytest
import requests
from google.cloud import tasks_v2

from relayflow.local.clients import publisher_client, subscriber_client, tasks_client
from relayflow.local.environment import PROJECT_ID
from relayflow.local.provision import provision_pubsub, provision_queues, push_endpoint, queue_path
from relayflow.local.stack import Stack
from relayflow.topology import load_topology

pytestmark = pytest.mark.emulators


def test_topics_exist(emulators: Stack) -> None:
    with publisher_client(emulators.env()["PUBSUB_EMULATOR_HOST"]) as publisher:
        topics = {t.name for t in publisher.list_topics(project=f"projects/{PROJECT_ID}")}

    assert {
        f"projects/{PROJECT_ID}/topics/{name}"
        for name in ("flow-requests", "flow-results", "flow-requests-dead")
    } <= topics


def test_start_subscription_pushes_to_the_function_with_dead_letter_policy(
    emulators: Stack,
) -> None:
    spec = load_topology().subscriptions.start

    with subscriber_client(emulators.env()["PUBSUB_EMULATOR_HOST"]) as subscriber:
        sub = subscriber.get_subscription(
            subscription=f"projects/{PROJECT_ID}/subscriptions/flow-requests-start"
        )

    assert sub.topic == f"projects/{PROJECT_ID}/topics/flow-requests"
    assert sub.push_config.push_endpoint == push_endpoint(emulators.ports, "flow-requests")
    assert sub.push_config.push_endpoint.endswith(
        f":{emulators.ports.start_function}/projects/{PROJECT_ID}/topics/flow-requests"
    )
    assert sub.ack_deadline_seconds == spec.ack_deadline_s
    assert (
        sub.dead_letter_policy.dead_letter_topic
        == f"projects/{PROJECT_ID}/topics/flow-requests-dead"
    )
    assert sub.dead_letter_policy.max_delivery_attempts == 5
    assert sub.retry_policy.minimum_backoff.total_seconds() == spec.min_backoff_s
    assert sub.retry_policy.maximum_backoff.total_seconds() == spec.max_backoff_s


def test_each_named_tenant_gets_its_own_start_topic_pushed_with_its_name_in_the_path(
    emulators: Stack,
) -> None:
    provision_pubsub(emulators.ports, load_topology(), ["acme"])
    shared = load_topology().subscriptions.start

    with subscriber_client(emulators.env()["PUBSUB_EMULATOR_HOST"]) as subscriber:
        sub = subscriber.get_subscription(
            subscription=f"projects/{PROJECT_ID}/subscriptions/flow-requests.acme.start"
        )

    assert sub.topic == f"projects/{PROJECT_ID}/topics/flow-requests.acme"
    assert sub.push_config.push_endpoint.endswith(
        f":{emulators.ports.start_function}/projects/{PROJECT_ID}/topics/flow-requests.acme"
    )
    assert sub.ack_deadline_seconds == shared.ack_deadline_s
    assert sub.dead_letter_policy.dead_letter_topic == (
        f"projects/{PROJECT_ID}/topics/{shared.dead_letter_topic}"
    )


@pytest.mark.parametrize(
    ("subscription", "topic"),
    [("flow-requests-dead-hold", "flow-requests-dead"), ("flow-results-hold", "flow-results")],
)
def test_hold_subscriptions_are_pull(emulators: Stack, subscription: str, topic: str) -> None:
    with subscriber_client(emulators.env()["PUBSUB_EMULATOR_HOST"]) as subscriber:
        sub = subscriber.get_subscription(
            subscription=f"projects/{PROJECT_ID}/subscriptions/{subscription}"
        )

    assert sub.topic == f"projects/{PROJECT_ID}/topics/{topic}"
    assert not sub.push_config.push_endpoint


@pytest.mark.parametrize("which", ["steps", "polls"])
def test_queues_have_the_topology_settings(emulators: Stack, which: str) -> None:
    spec = getattr(load_topology().queues, which)

    with tasks_client(emulators.env()["CLOUD_TASKS_EMULATOR_HOST"]) as client:
        queue = client.get_queue(name=queue_path(spec.name))

    assert queue.rate_limits.max_dispatches_per_second == spec.max_dispatches_per_second
    assert queue.rate_limits.max_concurrent_dispatches == spec.max_concurrent_dispatches
    retry = queue.retry_config
    assert retry.max_attempts == spec.max_attempts
    assert retry.max_retry_duration.total_seconds() == spec.max_retry_duration_s
    assert retry.min_backoff.total_seconds() == spec.min_backoff_s
    assert retry.max_backoff.total_seconds() == spec.max_backoff_s
    assert retry.max_doublings == spec.max_doublings
    assert queue.state == tasks_v2.Queue.State.RUNNING


def test_provisioning_twice_is_fine(emulators: Stack) -> None:
    provision_pubsub(emulators.ports, load_topology())
    provision_queues(emulators.ports, load_topology())


def test_clean_firestore_wipes_documents(emulators: Stack, clean_firestore: object) -> None:
    base = f"http://{emulators.env()['FIRESTORE_EMULATOR_HOST']}/v1/projects/{PROJECT_ID}/databases/(default)/documents/flows"
    session = requests.Session()
    session.trust_env = False
    created = session.post(
        f"{base}?documentId=f1", json={"fields": {"status": {"stringValue": "PENDING"}}}, timeout=10
    )
    assert created.ok, created.text

    emulators.wipe_firestore()

    assert session.get(f"{base}/f1", timeout=10).status_code == 404

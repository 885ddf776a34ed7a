"""Integration fixtures: relayflow's adapters wired to the session's real emulators.

Firestore is wiped per test (``clean_firestore``). Cloud Tasks cannot be wiped (and keeps
tombstones of every name), so each test gets unique flow ids from ``new_flow_id`` and the tasks
of those flows are deleted after the test. Tasks are scheduled an hour or more ahead and target
the emulator block's worker/poller ports, where nothing listens, so the emulator never
dispatches them anywhere.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator

import pytest
from google.api_core.exceptions import NotFound
from google.cloud import firestore, tasks_v2
from google.pubsub_v1 import SubscriberClient

from relayflow.core.planner import QueueNames
from relayflow.gcp import events, queue, store
from relayflow.local.clients import subscriber_client
from relayflow.local.stack import Stack
from relayflow.runtime import bulk_target, task_targets
from relayflow.settings import Settings
from relayflow.topology import Topology, load_topology

from .support import queued_tasks


@pytest.fixture
def topology() -> Topology:
    return load_topology()


@pytest.fixture
def settings(emulators: Stack, emulator_env: dict[str, str]) -> Settings:
    """Settings read from the emulator stack's environment, as an entry point would read them."""
    built = Settings()
    assert built.cloud_tasks_emulator_host == emulator_env["CLOUD_TASKS_EMULATOR_HOST"]
    assert str(built.worker_url).rstrip("/") == emulator_env["RELAYFLOW_WORKER_URL"]
    return built


@pytest.fixture
def firestore_client(settings: Settings, clean_firestore: Callable[[], None]) -> firestore.Client:
    return store.build_client(settings)


@pytest.fixture
def flow_store(firestore_client: firestore.Client, topology: Topology) -> store.FlowStore:
    return store.FlowStore(
        firestore_client,
        flows=topology.firestore.flows_collection,
        rejected=topology.firestore.rejected_collection,
    )


@pytest.fixture
def tasks_client(settings: Settings) -> Iterator[tasks_v2.CloudTasksClient]:
    with queue.build_client(settings) as client:
        yield client


@pytest.fixture
def task_queue(
    tasks_client: tasks_v2.CloudTasksClient, settings: Settings, topology: Topology
) -> queue.TaskQueue:
    return queue.TaskQueue(
        tasks_client,
        project=settings.project_id,
        location=settings.location,
        targets=task_targets(settings, topology),
        service_account=settings.tasks_service_account,
        bulk=bulk_target(settings, topology),
    )


@pytest.fixture
def queue_names(topology: Topology) -> QueueNames:
    return QueueNames(steps=topology.queues.steps.name, polls=topology.queues.polls.name)


@pytest.fixture
def publisher(settings: Settings, topology: Topology) -> events.Events:
    return events.Events(
        events.build_publisher(),
        project=settings.project_id,
        results_topic=topology.topics.results,
    )


@pytest.fixture
def new_flow_id(
    tasks_client: tasks_v2.CloudTasksClient,
    task_queue: queue.TaskQueue,
    queue_names: QueueNames,
) -> Iterator[Callable[[], str]]:
    """Make unique flow ids; every task of those flows is deleted after the test."""
    made: list[str] = []

    def make() -> str:
        flow_id = f"it-{uuid.uuid4().hex[:16]}"
        made.append(flow_id)
        return flow_id

    yield make
    for queue_name in (queue_names.steps, queue_names.polls):
        for task in queued_tasks(tasks_client, task_queue, queue_name, *made):
            with contextlib.suppress(NotFound):
                tasks_client.delete_task(name=task.name)


@pytest.fixture
def subscriber(emulator_env: dict[str, str]) -> Iterator[SubscriberClient]:
    with subscriber_client(emulator_env["PUBSUB_EMULATOR_HOST"]) as client:
        yield client


@pytest.fixture
def results_subscription(
    subscriber: SubscriberClient, settings: Settings, topology: Topology
) -> Iterator[str]:
    """A pull subscription of this test's own on the results topic, deleted after the test."""
    name = subscriber.subscription_path(settings.project_id, f"it-results-{uuid.uuid4().hex[:12]}")
    topic = f"projects/{settings.project_id}/topics/{topology.topics.results}"
    subscriber.create_subscription(name=name, topic=topic, ack_deadline_seconds=60)
    yield name
    subscriber.delete_subscription(subscription=name)

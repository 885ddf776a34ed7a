"""Create the topology (topics, subscriptions, queues) in the emulators; safe to run twice."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from functools import partial

from google.api_core.exceptions import AlreadyExists
from google.cloud import tasks_v2
from google.protobuf.duration_pb2 import Duration
from google.pubsub_v1 import (
    DeadLetterPolicy,
    PushConfig,
    RetryPolicy,
    SubscriberClient,
    Subscription,
)

from relayflow import topology as topo
from relayflow.local.clients import publisher_client, subscriber_client, tasks_client
from relayflow.local.environment import PROJECT_ID
from relayflow.local.ports import HOST, Ports
from relayflow.settings import Settings

# The location the services use unless told otherwise; the queues must live there.
LOCATION: str = Settings.model_fields["location"].default


def push_endpoint(ports: Ports, topic: str) -> str:
    """The start function's URL; its path names the topic so functions-framework sets source."""
    return f"http://{HOST}:{ports.start_function}/projects/{PROJECT_ID}/topics/{topic}"


def provision_pubsub(ports: Ports, topology: topo.Topology, tenants: Iterable[str] = ()) -> None:
    """Topics, the push subscriptions to the start function (the shared one, and one for each
    of ``tenants``' own topics, as Terraform makes them), and the pull 'hold' subscriptions."""
    host = f"{HOST}:{ports.pubsub}"
    starts = [topology.subscriptions.start, *(tenant_start(topology, t) for t in tenants)]
    with publisher_client(host) as publisher:
        for topic in (
            topology.topics.results,
            topology.topics.dead_letter,
            topology.topics.signals,
            *(start.topic for start in starts),
        ):
            _ignore_existing(partial(publisher.create_topic, name=_topic_path(topic)))
    with subscriber_client(host) as subscriber:
        for start in starts:
            push = push_endpoint(ports, start.topic)
            _create_subscription(subscriber, _subscription(start, push))
        for pull in (topology.subscriptions.dead_letter, topology.subscriptions.results):
            _create_subscription(subscriber, _subscription(pull, push=None))
        signals = topology.subscriptions.signals
        if signals is not None:  # callback completions, pushed to the api
            api = f"http://{HOST}:{ports.api}/signals"
            _create_subscription(subscriber, _subscription(signals, push=api))


def tenant_start(topology: topo.Topology, tenant: str) -> topo.Subscription:
    """``tenant``'s own start subscription: the shared one's settings, on its own topic."""
    names = topology.tenant_requests
    return topology.subscriptions.start.model_copy(
        update={"name": names.subscription_of(tenant), "topic": names.topic_of(tenant)}
    )


def provision_queues(ports: Ports, topology: topo.Topology) -> None:
    """The Cloud Tasks queues, every shard of each kind, with their rate limits and retry
    config (``topology`` as the stack runs it: its shards and any rate override)."""
    with tasks_client(f"{HOST}:{ports.cloud_tasks_grpc}") as client:
        parent = f"projects/{PROJECT_ID}/locations/{LOCATION}"
        for queue in topology.queues.provisioned():
            create = partial(client.create_queue, parent=parent, queue=_queue(parent, queue))
            _ignore_existing(create)


def queue_path(name: str) -> str:
    return f"projects/{PROJECT_ID}/locations/{LOCATION}/queues/{name}"


def _topic_path(topic: str) -> str:
    return f"projects/{PROJECT_ID}/topics/{topic}"


def _subscription(spec: topo.Subscription, push: str | None) -> Subscription:
    subscription = Subscription(
        name=f"projects/{PROJECT_ID}/subscriptions/{spec.name}",
        topic=_topic_path(spec.topic),
        ack_deadline_seconds=spec.ack_deadline_s,
    )
    if push is not None:
        subscription.push_config = PushConfig(push_endpoint=push)
    if spec.dead_letter_topic is not None:
        subscription.dead_letter_policy = DeadLetterPolicy(
            dead_letter_topic=_topic_path(spec.dead_letter_topic),
            max_delivery_attempts=spec.max_delivery_attempts or 5,
        )
    if spec.min_backoff_s is not None or spec.max_backoff_s is not None:
        subscription.retry_policy = RetryPolicy(
            minimum_backoff=Duration(seconds=spec.min_backoff_s or 10),
            maximum_backoff=Duration(seconds=spec.max_backoff_s or 600),
        )
    return subscription


def _create_subscription(subscriber: SubscriberClient, subscription: Subscription) -> None:
    _ignore_existing(partial(subscriber.create_subscription, request=subscription))


def _queue(parent: str, spec: topo.Queue) -> tasks_v2.Queue:
    # dispatch_deadline_s is per task (set when enqueueing), not a queue setting.
    return tasks_v2.Queue(
        name=f"{parent}/queues/{spec.name}",
        rate_limits=tasks_v2.RateLimits(
            max_dispatches_per_second=spec.max_dispatches_per_second,
            max_concurrent_dispatches=spec.max_concurrent_dispatches,
        ),
        retry_config=tasks_v2.RetryConfig(
            max_attempts=spec.max_attempts,
            max_retry_duration=Duration(seconds=spec.max_retry_duration_s),
            min_backoff=_duration(spec.min_backoff_s),
            max_backoff=_duration(spec.max_backoff_s),
            max_doublings=spec.max_doublings,
        ),
    )


def _duration(seconds: float) -> Duration:
    whole = int(seconds)
    return Duration(seconds=whole, nanos=round((seconds - whole) * 1e9))


def _ignore_existing(create: Callable[[], object]) -> None:
    """Run a create call; AlreadyExists means a previous run already made it, which is fine."""
    with contextlib.suppress(AlreadyExists):
        create()

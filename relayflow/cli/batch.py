"""Run a batch of flows through a running stack and summarise them (the demo and the bench).

Completion is learned from the ``flow-results`` events (one per terminal flow) on a temporary
subscription, so nothing polls Firestore in a loop; the flow documents are read once at the end.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from google.api_core.exceptions import NotFound
from google.cloud.pubsub_v1 import SubscriberClient
from google.cloud.pubsub_v1.subscriber.message import Message

from relayflow.core.ports import FlowDocuments
from relayflow.core.records import FlowRecord
from relayflow.core.tenants import DEFAULT_TENANT
from relayflow.gcp.events import PUBLISH_TIMEOUT_S, Events
from relayflow.topology import load_topology


@dataclass(frozen=True)
class Planned:
    """One message to publish: its flow id (None for a deliberately malformed message)."""

    flow_id: str | None
    body: dict[str, Any] | bytes


@dataclass
class BatchReport:
    """What happened to a batch."""

    published: int
    elapsed_s: float
    records: list[FlowRecord] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    # Message ids of the deliberately malformed messages, to look up in ``rejected``.
    malformed_ids: list[str] = field(default_factory=list)
    # When each flow's start message was acknowledged by Pub/Sub (wall clock).
    published_at: dict[str, datetime] = field(default_factory=dict)

    def by_status(self) -> dict[str, int]:
        return dict(Counter(str(r.status) for r in self.records))

    def durations_s(self) -> list[float]:
        """Run time of each ended flow: its document's creation to its end."""
        return [
            (r.finished_at - r.created_at).total_seconds()
            for r in self.records
            if r.finished_at is not None
        ]

    def latencies_s(self) -> list[float]:
        """End-to-end latency of each ended flow: its start message published to its end."""
        return [
            (r.finished_at - self.published_at[r.flow_id]).total_seconds()
            for r in self.records
            if r.finished_at is not None and r.flow_id in self.published_at
        ]


def start_topic(tenant: object, *, shared: str | None = None) -> str:
    """The topic a start message for ``tenant`` is published on: a named tenant's own
    (``flow-requests.{tenant}``: publishers are bound to tenants, and the start function takes
    the tenant from the topic), else ``shared`` (default: flow-requests), which starts the
    default tenant's flows only."""
    topology = load_topology()
    if not tenant or tenant == DEFAULT_TENANT:
        return shared or topology.topics.requests
    return topology.tenant_requests.topic_of(str(tenant))


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation; 0 for no values."""
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[max(0, min(98, round(q) - 1))]


class ResultWatcher:
    """Collects result events for a set of flow ids from a temporary subscription."""

    def __init__(self, subscriber: SubscriberClient, project: str, topic: str) -> None:
        self._subscriber = subscriber
        self._path = subscriber.subscription_path(project, f"relayflow-batch-{uuid.uuid4().hex}")
        topic_path = subscriber.topic_path(project, topic)
        subscriber.create_subscription(name=self._path, topic=topic_path, ack_deadline_seconds=60)
        self._wanted: set[str] = set()
        self._done: dict[str, str] = {}
        self._lock = threading.Lock()
        self._all_done = threading.Event()
        self._future = subscriber.subscribe(self._path, callback=self._on_message)

    def expect(self, flow_ids: set[str]) -> None:
        with self._lock:
            self._wanted |= flow_ids

    def _on_message(self, message: Message) -> None:
        message.ack()
        try:
            event = json.loads(message.data)
        except ValueError:
            return
        with self._lock:
            flow_id = str(event.get("flow_id"))
            if flow_id in self._wanted:
                self._done[flow_id] = str(event.get("status"))
            if self._wanted and self._wanted <= set(self._done):
                self._all_done.set()

    def wait(self, timeout_s: float) -> bool:
        """Wait until every expected flow has ended, or ``timeout_s``; True if all ended."""
        return self._all_done.wait(timeout_s)

    def done_count(self) -> int:
        with self._lock:
            return len(self._done)

    def close(self) -> None:
        self._future.cancel()
        with contextlib.suppress(NotFound):
            self._subscriber.delete_subscription(subscription=self._path)


def run_batch(
    planned: list[Planned],
    *,
    events: Events,
    store: FlowDocuments,
    watcher: ResultWatcher,
    topic: str,
    timeout_s: float,
    progress: Callable[[int, int, float], None] | None = None,
) -> BatchReport:
    """Publish every planned message (a tenant's on its own topic, the others on ``topic``),
    wait for the real flows to end, read their documents."""
    flow_ids = {p.flow_id for p in planned if p.flow_id}
    watcher.expect(flow_ids)
    started = time.monotonic()
    malformed_ids: list[str] = []
    published_at: dict[str, datetime] = {}
    futures = [(item, events.submit(_topic(item, topic), _data(item))) for item in planned]
    for item, future in futures:
        message_id = future.result(timeout=PUBLISH_TIMEOUT_S)
        if item.flow_id is None:
            malformed_ids.append(message_id)
        else:
            published_at[item.flow_id] = datetime.now(UTC)
    deadline = started + timeout_s
    while not watcher.wait(timeout_s=min(1.0, max(0.0, deadline - time.monotonic()))):
        if progress:
            progress(watcher.done_count(), len(flow_ids), time.monotonic() - started)
        if time.monotonic() >= deadline:
            break
    elapsed = time.monotonic() - started
    if progress:
        progress(watcher.done_count(), len(flow_ids), elapsed)
    records, missing = [], []
    for flow_id in sorted(flow_ids):
        record = store.get(flow_id)
        if record is None:
            missing.append(flow_id)
        else:
            records.append(record)
    return BatchReport(
        published=len(planned),
        elapsed_s=elapsed,
        records=records,
        missing=missing,
        malformed_ids=malformed_ids,
        published_at=published_at,
    )


def _topic(item: Planned, shared: str) -> str:
    tenant = item.body.get("tenant") if isinstance(item.body, dict) else None
    return start_topic(tenant, shared=shared)


def _data(item: Planned) -> bytes:
    if isinstance(item.body, bytes):
        return item.body
    return json.dumps(item.body, separators=(",", ":")).encode("utf-8")

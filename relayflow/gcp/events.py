"""Pub/Sub: start messages in, result events out."""

from __future__ import annotations

import json
from concurrent.futures import Future
from typing import Any

from google.cloud.pubsub_v1 import PublisherClient, SubscriberClient

from relayflow.core.records import FlowRecord
from relayflow.core.result_events import result_attributes, result_event
from relayflow.telemetry import Counters, pubsub_trace_attributes

PUBLISH_TIMEOUT_S = 30.0


def build_publisher() -> PublisherClient:
    """A publisher; the library itself honours PUBSUB_EMULATOR_HOST."""
    return PublisherClient()


def subscriber() -> SubscriberClient:
    """A subscriber (pull, ack); the library itself honours PUBSUB_EMULATOR_HOST."""
    return SubscriberClient()


class Events:
    """Publishes JSON messages to relayflow's topics."""

    def __init__(
        self,
        publisher: PublisherClient,
        *,
        project: str,
        results_topic: str = "flow-results",
        counters: Counters | None = None,
    ) -> None:
        self._publisher = publisher
        self._project = project
        self._results = results_topic
        self._counters = counters or Counters()

    def publish(self, topic: str, body: dict[str, Any], **attributes: str) -> str:
        """Publish ``body`` as JSON and wait for the message id (raises on failure)."""
        data = json.dumps(body, separators=(",", ":")).encode("utf-8")
        return self.publish_raw(topic, data, **attributes)

    def publish_raw(self, topic: str, data: bytes, **attributes: str) -> str:
        """Publish bytes as they are and wait for the message id (raises on failure)."""
        return self.submit(topic, data, **attributes).result(timeout=PUBLISH_TIMEOUT_S)

    def submit(self, topic: str, data: bytes, **attributes: str) -> Future[str]:
        """Publish bytes without waiting: the client batches; the future gives the message id."""
        path = self._publisher.topic_path(self._project, topic)
        future: Future[str] = self._publisher.publish(path, data, **attributes)
        self._counters.add("messages_published")
        return future

    def publish_result(self, record: FlowRecord) -> str:
        """Announce a terminal flow on the results topic.

        Inside a span, the event carries it as ``googclient_traceparent`` so that a subscriber
        can continue the flow's trace.
        """
        return self.publish(
            self._results,
            result_event(record),
            **result_attributes(record),
            **pubsub_trace_attributes(),
        )

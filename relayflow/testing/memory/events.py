"""Result events in a list (``core.ports.Events``; the Pub/Sub one is ``gcp.events``)."""

from __future__ import annotations

from typing import Any

from relayflow.core.records import FlowRecord
from relayflow.core.result_events import result_event


class MemoryEvents:
    """Result events, in the order they were published."""

    def __init__(self) -> None:
        self.published: list[dict[str, Any]] = []
        self.failures_left = 0  # how many publishes fail before they succeed again

    def publish_result(self, record: FlowRecord) -> str:
        if self.failures_left:
            self.failures_left -= 1
            raise ConnectionError("pubsub unavailable")
        self.published.append(result_event(record))
        return str(len(self.published))

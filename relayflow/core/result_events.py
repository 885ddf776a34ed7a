"""What a terminal flow announces on ``flow-results``: the result event's body and attributes.

A flow publishes one event per generation when it ends, and, if it ended with its clean-up
pending, another (``event: cleanup``) once the clean-up is over. Subscribers dedupe on flow id,
generation and ``event``.
"""

from __future__ import annotations

from typing import Any

from relayflow.core.records import CleanupState, FlowRecord


def event_kind(record: FlowRecord) -> str:
    """Which event an ended flow publishes now: ``result`` when it ends, and ``cleanup`` when
    the clean-up it ended with is over (done or abandoned)."""
    ended = record.cleanup is not None and record.cleanup.state is not CleanupState.PENDING
    return "cleanup" if ended else "result"


def result_event(record: FlowRecord) -> dict[str, Any]:
    """The body of the events a terminal flow publishes (per generation): its result, and if
    it ended with its clean-up pending, the same once the clean-up is over."""
    assert record.result is not None
    cleanup = record.cleanup.model_dump(mode="json") if record.cleanup is not None else None
    return {
        "flow_id": record.flow_id,
        "flow": record.flow,
        "version": record.version,
        "tenant": record.tenant,
        "generation": record.position.generation,
        **record.result.model_dump(mode="json"),
        "event": event_kind(record),
        "cleanup": cleanup,
    }


def result_attributes(record: FlowRecord) -> dict[str, str]:
    """The result event's Pub/Sub attributes: enough for a subscriber to filter and to dedupe
    (one event per flow, generation and ``event``) without parsing the body."""
    attributes = {
        "flow_id": record.flow_id,
        "flow": record.flow,
        "tenant": record.tenant,
        "status": str(record.status),
        "generation": str(record.position.generation),
        "event": event_kind(record),
    }
    if record.cleanup is not None:
        attributes["cleanup"] = str(record.cleanup.state)
    return attributes

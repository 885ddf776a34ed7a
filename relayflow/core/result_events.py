"""What a terminal flow announces on ``flow-results``: the result event's body and attributes.

A flow publishes one event per generation when it ends, and, if it ended with its clean-up
pending, another (``event: cleanup``) once the clean-up is over. Subscribers dedupe on flow id,
generation and ``event``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from relayflow.core.records import Cleanup, CleanupState, FlowRecord
from relayflow.core.state import Status


class ResultEvent(BaseModel):
    """The body of a result event: the published schema (``relayflow.schemas``) is this
    model's, and ``result_event`` builds every event through it, so the two cannot drift.
    Subscribers should ignore fields they do not know: later versions may add some."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"additionalProperties": True})

    flow_id: str = Field(description="The id the flow was started with.")
    flow: str = Field(description="The flow's name.")
    version: int = Field(description="The version of the flow's definition it ran.")
    tenant: str
    labels: dict[str, str] = Field(
        default_factory=dict, description="The labels it was started with (none: {})."
    )
    generation: int = Field(description="0, then one more for each operator retry.")
    status: Status = Field(description="How it ended: SUCCEEDED, FAILED, TIMED_OUT, CANCELLED.")
    code: str = Field(description="OK, or the error code that ended it.")
    message: str
    data: dict[str, Any] | None = Field(default=None, description="The output, if it succeeded.")
    error: dict[str, Any] | None = Field(default=None, description="The error, if not.")
    event: Literal["result", "cleanup"] = Field(
        description="result when it ends; cleanup once the clean-up it ended with is over."
    )
    cleanup: Cleanup | None = None
    # What analytics measure (docs/analytics.md): run time and the tries a flow's cost follows.
    created_at: datetime | None = Field(
        default=None, description="When the flow was created; a retry keeps it."
    )
    finished_at: datetime | None = Field(
        default=None, description="When it ended (the generation's end, for a cleanup event too)."
    )
    polls: int = Field(default=0, description="Polls it ran, over every generation.")
    attempts: int = Field(
        default=0, description="Tries of its actions and compensations, over every generation."
    )


def event_kind(record: FlowRecord) -> str:
    """Which event an ended flow publishes now: ``result`` when it ends, and ``cleanup`` when
    the clean-up it ended with is over (done or abandoned)."""
    ended = record.cleanup is not None and record.cleanup.state is not CleanupState.PENDING
    return "cleanup" if ended else "result"


def result_event(record: FlowRecord) -> dict[str, Any]:
    """The body of the events a terminal flow publishes (per generation): its result, and if
    it ended with its clean-up pending, the same once the clean-up is over."""
    assert record.result is not None
    event = ResultEvent(
        flow_id=record.flow_id,
        flow=record.flow,
        version=record.version,
        tenant=record.tenant,
        labels=record.labels,
        generation=record.position.generation,
        **record.result.model_dump(),
        event="cleanup" if event_kind(record) == "cleanup" else "result",
        cleanup=record.cleanup,
        created_at=record.created_at,
        finished_at=record.finished_at,
        polls=record.polls,
        attempts=record.attempts,
    )
    return event.model_dump(mode="json")


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

"""The flow document (``flows/{flow_id}``) and its parts, as typed models.

The document is the whole truth about a flow: status, position, the task that must exist for it
to make progress (``next``), step outputs, a bounded history, and the result once terminal.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from relayflow.core.position import FLOW_ID_PATTERN, Position, TaskKind
from relayflow.core.state import Status


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class HistoryEntry(_Model):
    """One thing that happened: a step try, a poll, a compensation, an operator action."""

    at: datetime
    generation: int = 0
    step: str
    kind: TaskKind
    attempt: int = 0
    poll: int = 0
    outcome: str
    detail: str = ""
    delay_s: float | None = None


class NextTask(_Model):
    """The task that must exist for the flow to progress; re-ensured on any doubt."""

    queue: str
    task_id: str
    run_at: datetime
    position: Position


class Result(_Model):
    """How a flow ended: ``{status, code, message, data | error}``."""

    status: Status
    code: str
    message: str
    data: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class Claim(_Model):
    """One delivery's lease on running the side effect at ``position`` until ``until``.

    Cloud Tasks may deliver a task twice at once, or again when a handler outlives its
    dispatch deadline; the claim makes the second delivery wait (a 409, retried later)
    instead of calling the external API a second time.
    """

    position: Position
    until: datetime


class FlowRecord(_Model):
    """The Firestore document of one flow."""

    flow_id: str = Field(pattern=FLOW_ID_PATTERN)
    flow: str
    input: dict[str, Any]
    status: Status
    position: Position
    outputs: dict[str, Any] = Field(default_factory=dict)
    step_started_at: datetime
    deadline_at: datetime | None = None
    next: NextTask | None = None
    # Top-level copy of next.run_at so the sweeper can query (status, next_run_at).
    next_run_at: datetime | None = None
    history: list[HistoryEntry] = Field(default_factory=list)
    history_dropped: int = 0
    result: Result | None = None
    pending_result: Result | None = None
    result_published: bool = False
    message_id: str | None = None
    polls: int = 0
    attempts: int = 0
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None
    # Set when the flow ends; a Firestore TTL policy (Terraform) deletes the doc after it.
    expire_at: datetime | None = None
    # The W3C traceparent of the flow's start, so every later task (retries, sweeper rescues,
    # operator actions) joins the flow's one trace. None when tracing was off at the start.
    trace: str | None = None
    claim: Claim | None = None

    def to_doc(self) -> dict[str, Any]:
        """The Firestore representation (datetimes stay datetimes)."""
        return self.model_dump(mode="python", exclude_none=False)

    @classmethod
    def from_doc(cls, data: dict[str, Any]) -> FlowRecord:
        """Parse a Firestore document."""
        return cls.model_validate(data)

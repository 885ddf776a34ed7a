"""The flow document (``flows/{flow_id}``) and its parts, as typed models.

The document is the whole truth about a flow: status, position, the task that must exist for it
to make progress (``next``), step outputs, a bounded history, and the result once terminal.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
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
    by: str = ""  # who did it, for an operator action (cancel, retry): the caller's identity


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
    instead of calling the external API a second time. It names its ``holder``: only the
    holder's commit lands, so a delivery that outlived its lease cannot overwrite the work of
    the one that took over. A holder whose commit failed ``released`` it, so the next delivery
    need not wait out the lease.
    """

    position: Position
    until: datetime
    holder: str = ""
    released: bool = False


class EffectState(StrEnum):
    """What is known of one step's side effect."""

    UNKNOWN = "unknown"  # begun (claimed) and not known to have happened or not
    DONE = "done"  # the step completed
    UNDONE = "undone"  # its compensation completed
    UNDO_FAILED = "undo_failed"  # its compensation failed for good: it may still be live
    REFUSED = "refused"  # its first try was refused for good: it never happened

    @property
    def live(self) -> bool:
        """Whether the effect may exist in the external system."""
        return self not in (EffectState.UNDONE, EffectState.REFUSED)


class Effect(_Model):
    """One side effect a step may have had, for the saga (DESIGN invariant 12).

    An effect is recorded when an action claims its position, before the external call, so a
    step whose every response was lost is still undone. ``n`` counts this step's earlier
    effects that are over (undone or refused); it names the idempotency key, so a retried flow
    replays an effect that may be live instead of making a second one, and makes a fresh one
    (under a fresh key) once the old one is gone.
    """

    step: str
    n: int = 0
    generation: int = 0
    state: EffectState = EffectState.UNKNOWN
    at: datetime
    done_at: datetime | None = None

    @property
    def order(self) -> datetime:
        """When it took effect, as far as anyone knows: compensation runs newest first."""
        return self.done_at or self.at


class FlowRecord(_Model):
    """The Firestore document of one flow."""

    flow_id: str = Field(pattern=FLOW_ID_PATTERN)
    flow: str
    # The definition version the flow started on; it runs to its end on that version.
    version: int = 1
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
    effects: list[Effect] = Field(default_factory=list)
    # Deliveries of the current step that began (claimed) and never committed: crashed, timed
    # out, or their commit failed. They count toward the step's attempts (invariant 11).
    uncommitted: int = 0
    # Polls of the current step that ended in a retryable error: they do not use up max_polls.
    poll_errors: int = 0

    def live_effect(self, step: str) -> Effect | None:
        """The effect of ``step`` that may still exist, if any (there is at most one)."""
        return next((e for e in self.effects if e.step == step and e.state.live), None)

    def to_doc(self) -> dict[str, Any]:
        """The Firestore representation (datetimes stay datetimes)."""
        return self.model_dump(mode="python", exclude_none=False)

    @classmethod
    def from_doc(cls, data: dict[str, Any]) -> FlowRecord:
        """Parse a Firestore document."""
        return cls.model_validate(data)


def result_event(record: FlowRecord) -> dict[str, Any]:
    """The body of the one event a terminal flow publishes (per generation)."""
    assert record.result is not None
    return {
        "flow_id": record.flow_id,
        "flow": record.flow,
        "version": record.version,
        "generation": record.position.generation,
        **record.result.model_dump(mode="json"),
    }


def result_attributes(record: FlowRecord) -> dict[str, str]:
    """The result event's Pub/Sub attributes: enough for a subscriber to filter and to dedupe
    (one event per flow and generation) without parsing the body."""
    return {
        "flow_id": record.flow_id,
        "flow": record.flow,
        "status": str(record.status),
        "generation": str(record.position.generation),
    }

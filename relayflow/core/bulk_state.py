"""What relayflow keeps of each bulk action, and the ports it is kept and run through.

``bulk_actions/{id}`` is the bulk action (``BulkAction``): its filter, action, who and why,
rate, state, counts and cursor (the next batch). It is written once per batch (progress,
by compare-and-set on the document's update time), never once per flow. Its flows' rows
(``BulkRow``: the dry run's preview of each flow, then what became of it) are kept apart, in
chunk documents of ``CHUNK_ROWS`` rows (``bulk_actions/{id}/bulk_rows/{chunk}``), which the
api, the CLI and the console page through, a chunk a page.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from relayflow.core.bulk import BulkKind, BulkTask
from relayflow.core.planner import Preview
from relayflow.core.ports import Enqueued
from relayflow.core.records import FlowRecord
from relayflow.core.state import Status

# Reasons kept per count (skipped, refused by the dry run), the errors kept, and the changes
# of state logged: a bulk document stays small however many flows it takes.
MAX_REASONS = 20
MAX_ERRORS = 10
MAX_LOG = 30
MAX_NAMES = 50  # steps or effects a row names (the rest counted)
MAX_NOTE_CHARS = 300
OTHER = "(other reasons)"


class BulkState(StrEnum):
    """Where a bulk action is: previewed (its dry run stored, nothing done), running, paused
    by an operator, done (every batch acted on), cancelled by an operator (what was done
    stays done) or failed (it could not go on: its rows are gone)."""

    PREVIEWED = "previewed"
    RUNNING = "running"
    PAUSED = "paused"
    DONE = "done"
    CANCELLED = "cancelled"
    FAILED = "failed"

    @property
    def over(self) -> bool:
        return self in (BulkState.DONE, BulkState.CANCELLED, BulkState.FAILED)


class Outcome(StrEnum):
    """What a bulk action did to one flow."""

    DONE = "done"  # acted on (its history holds the bulk action's entry)
    SKIPPED = "skipped"  # not acted on, and why (refused by the dry run, changed since, gone)
    FAILED = "failed"  # the operation failed for good (the store refused the change)


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class BulkEvent(_Model):
    """A change of a bulk action's state, and who made it why."""

    at: datetime
    what: str
    by: str = ""
    reason: str = ""


class BulkRow(_Model):
    """One flow of a bulk action: what it was at the dry run, what the dry run said would
    happen to it, and what did (``outcome``, empty until its batch ran)."""

    key: str
    flow_id: str
    tenant: str
    flow: str
    version: int
    status: Status
    generation: int
    code: str | None = None
    allowed: bool
    reason: str = ""
    rerun: list[str] = Field(default_factory=list)
    undone: list[str] = Field(default_factory=list)
    kept: list[str] = Field(default_factory=list)
    detail: dict[str, Any] = Field(default_factory=dict)
    outcome: Outcome | None = None
    note: str = ""
    at: datetime | None = None

    @classmethod
    def of(cls, record: FlowRecord, preview: Preview) -> BulkRow:
        """The row of ``record`` as previewed."""
        return cls(
            key=record.key,
            flow_id=record.flow_id,
            tenant=record.tenant,
            flow=record.flow,
            version=record.version,
            status=record.status,
            generation=record.position.generation,
            code=record.result.code if record.result is not None else None,
            allowed=preview.allowed,
            reason=preview.reason[:MAX_NOTE_CHARS],
            rerun=_names(preview.rerun),
            undone=_names(preview.undone),
            kept=_names(preview.kept),
            detail=preview.detail,
        )

    @property
    def dependencies(self) -> list[str]:
        """What the steps it would run (or undo) call: whose breakers pace its batch."""
        found = self.detail.get("dependencies") or []
        return [str(name) for name in found]

    def ended(self, outcome: Outcome, note: str, at: datetime) -> BulkRow:
        return self.model_copy(update={"outcome": outcome, "note": note[:MAX_NOTE_CHARS], "at": at})

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class BulkAction(_Model):
    """A bulk action's document (``bulk_actions/{id}``). ``version``: the store's token for
    compare-and-set (None: not stored yet)."""

    id: str
    action: BulkKind
    # A reset's step, and whether what ran from it is undone first (``Engine.reset``).
    step: str | None = None
    undo: bool = True
    filter: dict[str, Any]  # ``core.bulk.filter_doc``
    tenant: str | None = None  # the filter's: who may see it (an unscoped one: everyone's)
    reason: str
    by: str  # who made it (its dry run)
    run_by: str = ""  # who ran it: each flow's history names them
    rate_per_s: float
    batch_size: int
    state: BulkState = BulkState.PREVIEWED
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    matched: int = 0  # flows the filter matched at the dry run
    allowed: int = 0  # of them, those the dry run said it would act on
    chunks: int = 0  # chunk documents of rows
    refused: dict[str, int] = Field(default_factory=dict)  # the dry run's refusals, by reason
    done: int = 0
    skipped: int = 0
    failed: int = 0
    skipped_why: dict[str, int] = Field(default_factory=dict)
    errors: list[str] = Field(default_factory=list)  # the newest failures, for the operator
    next_batch: int = 0  # the cursor: every batch before it has been acted on
    round: int = 0  # runs of it: a resume starts a new round (its tasks are named anew)
    deferrals: int = 0  # put-offs of the next batch (each a task name of its own)
    next_at: datetime | None = None  # when the next batch is due
    waiting: str = ""  # why the next batch is put off (a breaker open, a budget spent)
    log: list[BulkEvent] = Field(default_factory=list)
    # When Firestore's TTL may delete it: the retention after it ended (after it was made,
    # while it has not), as flows' documents go.
    expire_at: datetime | None = None
    version: Any = Field(default=None, exclude=True)

    @property
    def batches(self) -> int:
        return -(-self.matched // self.batch_size)

    @property
    def settled(self) -> int:
        """Flows acted on or passed over so far."""
        return self.done + self.skipped + self.failed

    def task(self) -> BulkTask:
        """The task of its next batch, as it is now."""
        return BulkTask(
            bulk_id=self.id, batch=self.next_batch, round=self.round, deferral=self.deferrals
        )

    def logged(self, at: datetime, what: str, *, by: str = "", reason: str = "") -> BulkAction:
        event = BulkEvent(at=at, what=what, by=by, reason=reason)
        return self.model_copy(update={"log": [*self.log, event][-MAX_LOG:], "updated_at": at})

    def to_doc(self) -> dict[str, Any]:
        return self.model_dump(mode="python")

    @classmethod
    def from_doc(cls, doc: dict[str, Any], version: Any) -> BulkAction:
        """pydantic.ValidationError if it does not parse."""
        return cls.model_validate({**doc, "version": version})


def counted(found: dict[str, int], reason: str, n: int = 1) -> dict[str, int]:
    """``found`` with ``n`` more for ``reason``: at most MAX_REASONS reasons, the rest as one."""
    key = reason[:MAX_NOTE_CHARS] or "(no reason)"
    if key not in found and len(found) >= MAX_REASONS - 1:
        key = OTHER
    return {**found, key: found.get(key, 0) + n}


def _names(names: Sequence[str]) -> list[str]:
    if len(names) <= MAX_NAMES:
        return list(names)
    return [*names[:MAX_NAMES], f"... and {len(names) - MAX_NAMES} more"]


class BulkStore(Protocol):
    """Bulk actions' documents and their rows (Firestore ``bulk_actions``; dicts in tests)."""

    def create(
        self, action: BulkAction, chunks: Sequence[Sequence[BulkRow]], *, rows_expire_at: datetime
    ) -> None:
        """Store a new bulk action: its rows' chunks first (TTL may delete them after
        ``rows_expire_at``), then its document."""
        ...

    def read(self, bulk_id: str) -> BulkAction | None:
        """The bulk action's document and its version, or None."""
        ...

    def write(self, action: BulkAction) -> bool:
        """Write ``action`` if its document is still at ``action.version``; False, writing
        nothing, if another writer got there first."""
        ...

    def recent(self, *, limit: int = 50) -> list[BulkAction]:
        """Bulk actions, the newest made first."""
        ...

    def running(self, *, limit: int = 100) -> list[BulkAction]:
        """Bulk actions whose state is running (the sweeper's look for lost batches)."""
        ...

    def rows(self, bulk_id: str, chunk: int) -> tuple[list[BulkRow], Any]:
        """Chunk ``chunk``'s rows (empty if it is missing) and its version."""
        ...

    def write_rows(self, bulk_id: str, chunk: int, rows: Sequence[BulkRow], version: Any) -> bool:
        """Write chunk ``chunk``'s rows if it is still at ``version``; False if not."""
        ...


class BulkQueue(Protocol):
    """Where a bulk action's batches are enqueued as Cloud Tasks, each under its own name."""

    def ensure_batch(self, task: BulkTask, run_at: datetime) -> Enqueued:
        """Create ``task`` for ``run_at`` unless a task of its name exists (or existed)."""
        ...

"""Bulk actions, the pure parts: which actions there are, how a bulk action's flows are cut
into batches and paced, the Cloud Task each batch runs as, and its filter as stored.

An operator retries (cancels, resets to a step) every flow a filter matches — four hundred
flows a dependency's outage failed — with one bulk action, run server-side
(``core.bulk_runner``): its dry run lists what would happen to each flow, then the worker acts
on exactly that set in batches, one Cloud Task each, at a rate that cannot stampede a
dependency just back.

Pacing, and why batches are not smaller: a batch writes its bulk action's document once (its
progress and cursor, by compare-and-set), and Firestore sustains about one write a second to
one document (https://firebase.google.com/docs/firestore/best-practices#hotspots, "Updates to
a single document"). relayflow designs for half of it (as the breakers' windows do): batches
come at least ``MIN_PERIOD_S`` = 2 s apart, so a batch holds ``rate x 2 s`` flows (at least one)
and the rate is at most ``MAX_RATE_PER_S`` (a batch of ``MAX_BATCH`` every 2 s). A batch size
divides ``CHUNK_ROWS``, so a batch's rows lie in one chunk document.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import fields
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from relayflow.core.listing import FlowFilter
from relayflow.core.state import Status

# The most flows one bulk action takes: its dry run reads each (a page of whole documents at a
# time) within one api request, and keeps its row in one of at most 100 chunk documents.
MAX_FLOWS = 10_000
# Rows (one per flow: its preview, then its outcome) per chunk document: 100 rows of at most a
# few KB each stay far inside Firestore's 1 MiB a document
# (https://firebase.google.com/docs/firestore/quotas#collections_documents_and_fields).
CHUNK_ROWS = 100
MAX_BATCH = CHUNK_ROWS
# Batch sizes: the divisors of CHUNK_ROWS, so no batch spans two chunk documents.
BATCH_SIZES = tuple(n for n in range(1, CHUNK_ROWS + 1) if CHUNK_ROWS % n == 0)
MIN_PERIOD_S = 2.0  # between two batches: the bulk document's writes stay <= 0.5 a second
MAX_RATE_PER_S = MAX_BATCH / MIN_PERIOD_S
MIN_RATE_PER_S = 0.01
# Flows a second by default: a dependency back from an outage gets its flows back gently.
DEFAULT_RATE_PER_S = 5.0
BULK_ID_PATTERN = r"^bulk-[0-9a-f]{12}$"
# A batch the worker lost (its task gone, or retried past the queue's retry limit) is made
# again under a new name by the sweeper once it is this late.
LOST_AFTER_S = 300.0
# The longest a batch is put off at a time while a dependency's breaker refuses: it looks again.
MAX_PUT_OFF_S = 60.0


class BulkKind(StrEnum):
    """What a bulk action does to each flow: the same engine operation one flow's uses."""

    RETRY = "retry"
    CANCEL = "cancel"
    RESET = "reset"  # to a step of the flow (``BulkAction.step``), undoing what ran from it or not


class BulkTask(BaseModel):
    """The body of a bulk action's batch task (``POST /tasks/bulk`` on the worker): which
    batch of which bulk action, in which run of it (``round``: a resume starts a new one) and
    which put-off of the batch (``deferral``): each combination a task name of its own."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bulk_id: str = Field(pattern=BULK_ID_PATTERN)
    batch: int = Field(ge=0, le=MAX_FLOWS)
    round: int = Field(default=0, ge=0)
    deferral: int = Field(default=0, ge=0)

    @property
    def slot(self) -> tuple[int, int, int]:
        """Where in its bulk action's run the task is: (round, batch, deferral)."""
        return (self.round, self.batch, self.deferral)

    def task_id(self) -> str:
        """Its Cloud Tasks task id: a hash prefix first (Google warns that sequential names
        slow every operation on a queue), then the readable rest (DESIGN invariant 3)."""
        body = f"{self.bulk_id}-r{self.round}-b{self.batch}-d{self.deferral}"
        prefix = hashlib.sha256(body.encode()).hexdigest()[:8]
        return f"{prefix}-{body}"


def batch_size(rate_per_s: float) -> int:
    """Flows per batch at ``rate_per_s``: what ``MIN_PERIOD_S`` holds at that rate, rounded
    up to a divisor of ``CHUNK_ROWS``."""
    wanted = math.ceil(rate_per_s * MIN_PERIOD_S - 1e-9)
    return next(n for n in BATCH_SIZES if n >= wanted)


def period_s(rate_per_s: float, size: int) -> float:
    """Seconds from one batch's start to the next's: ``size`` flows at ``rate_per_s``."""
    return size / rate_per_s


def checked_rate(rate_per_s: float) -> float:
    """``rate_per_s`` if a bulk action may run at it; ValueError saying the bounds."""
    if not MIN_RATE_PER_S <= rate_per_s <= MAX_RATE_PER_S or math.isnan(rate_per_s):
        raise ValueError(
            f"rate_per_s must be {MIN_RATE_PER_S:g}..{MAX_RATE_PER_S:g} flows a second (a "
            f"batch of at most {MAX_BATCH} every {MIN_PERIOD_S:g} s), not {rate_per_s!r}"
        )
    return rate_per_s


def batches(count: int, size: int) -> int:
    """How many batches ``count`` rows make at ``size`` a batch."""
    return math.ceil(count / size)


def chunk_of(batch: int, size: int) -> tuple[int, int, int]:
    """Where batch ``batch`` lies: its chunk document, and its first and end row there."""
    first = batch * size
    chunk, start = divmod(first, CHUNK_ROWS)
    return chunk, start, start + size


def is_bulk_id(text: str) -> bool:
    return re.fullmatch(BULK_ID_PATTERN, text) is not None


# -- the filter, as a bulk action's document keeps it ------------------------------------------


def filter_doc(wanted: FlowFilter) -> dict[str, Any]:
    """The filter's fields that narrow it, as stored (every field of ``FlowFilter``, so a
    field added to the listing's filter is kept without a change here)."""
    return {
        f.name: _stored(value)
        for f in fields(FlowFilter)
        if (value := getattr(wanted, f.name)) not in (None, (), "")
    }


def _stored(value: Any) -> Any:
    """A filter's value as Firestore keeps it: a status by name, pairs (labels) as maps (an
    array may not hold arrays)."""
    if isinstance(value, Status):
        return value.value
    if isinstance(value, tuple) and all(isinstance(v, tuple) for v in value):
        return [{"pair": list(v)} for v in value]
    return value


def filter_of(doc: dict[str, Any]) -> FlowFilter:
    """The filter a stored ``filter_doc`` describes (fields this release does not know are
    left out: a document written by a newer one still reads)."""
    known = {f.name for f in fields(FlowFilter)}
    values = {k: _loaded(k, v) for k, v in doc.items() if k in known and v is not None}
    return FlowFilter(**values)


def filter_json(wanted: FlowFilter) -> dict[str, Any]:
    """The filter as the api, the CLI and the console show it (pairs as ``key=value``)."""
    shown = {}
    for name, value in filter_doc(wanted).items():
        if isinstance(value, datetime):
            value = value.isoformat()
        elif isinstance(value, list):
            value = [("=".join(v["pair"]) if isinstance(v, dict) else v) for v in value]
        shown[name] = value
    return shown


def _loaded(name: str, value: Any) -> Any:
    if name == "status":
        return Status(value)
    if isinstance(value, list):  # Firestore gives a tuple back as a list; pairs as maps
        return tuple(tuple(v["pair"]) if isinstance(v, dict) else v for v in value)
    return value

"""Finding flows and rejected messages: filters, summaries, and cursors for paging.

Lists are newest first, by ``updated_at`` then id, and paged by an opaque cursor that names
the last item shown (its time and id): the next page starts after it (Firestore's
``start_after``), so paging costs one read per item shown, however deep, and a flow that
changes meanwhile moves to the top instead of shifting every page.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict

from relayflow.core import labels as label_rules
from relayflow.core.errors import RelayflowError
from relayflow.core.position import Position, is_document_id
from relayflow.core.records import FlowRecord, parent_spread
from relayflow.core.state import Status

T = TypeVar("T")
MAX_CURSOR_ID = 1500  # Firestore's limit on a document id, in bytes
# The longest cursor ``Cursor.encode`` makes: an id of MAX_CURSOR_ID bytes JSON-escaped (at
# most 6 characters a byte) and a time, in base64. Longer text is refused before decoding, so
# no one can make the api parse megabytes (or 100,000 nested brackets) of JSON.
MAX_CURSOR_CHARS = 4 * (6 * MAX_CURSOR_ID + 64) // 3 + 4
# What Firestore stores (and Python's datetime holds, in UTC): times outside are refused.
EARLIEST = datetime.min.replace(tzinfo=UTC)
LATEST = datetime.max.replace(tzinfo=UTC)
# The document fields a summary is made of: what a Firestore projection of a list reads.
SUMMARY_FIELDS = (
    "flow_id",
    "flow",
    "version",
    "tenant",
    "status",
    "position",
    "polls",
    "attempts",
    "created_at",
    "updated_at",
    "finished_at",
    "result.code",
    "cleanup.state",
    "labels",
    "dependency",
)
# Firestore takes one array-contains filter a query
# (https://cloud.google.com/firestore/docs/query-data/queries#limitations): a list by several
# labels asks the index for the first and checks the others on the flows it finds, at most this
# many past those a page shows. A page that reaches it ends early, its cursor after the last
# flow checked (the reads a page costs stay bounded however rare the other labels are).
MAX_SIFTED = 1000


class InvalidCursor(RelayflowError):
    """Raised when a page cursor was not made by ``Cursor.encode`` (edited, or cut short)."""


class Uncountable(RelayflowError):
    """Raised when flows are counted by more labels than a count can ask (one)."""


class OutOfRange(ValueError):
    """Raised when a time is outside what Firestore stores (0001-01-01 to 9999-12-31, UTC)."""


def in_utc(when: datetime) -> datetime:
    """``when`` (naive: UTC) in UTC; OutOfRange if UTC cannot hold it, as Firestore cannot:
    ``0001-01-01T00:00:00+14:00`` is still year 0 in UTC."""
    if when.tzinfo is None:
        return when.replace(tzinfo=UTC)
    try:
        return when.astimezone(UTC)
    except OverflowError:
        raise OutOfRange(
            f"{when.isoformat()} is outside {EARLIEST.isoformat()}..{LATEST.isoformat()}"
        ) from None


@dataclass(frozen=True)
class Cursor:
    """Where a page ended: the last item's time and id. Opaque to callers."""

    at: datetime
    id: str

    def encode(self) -> str:
        raw = json.dumps([self.at.isoformat(), self.id], separators=(",", ":"))
        return base64.urlsafe_b64encode(raw.encode("utf-8")).decode("ascii").rstrip("=")

    @classmethod
    def decode(cls, text: str) -> Cursor:
        """The cursor ``text`` encodes, or InvalidCursor."""
        if len(text) > MAX_CURSOR_CHARS:
            raise InvalidCursor(f"cursor is longer than any this service gives out ({len(text)})")
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            at, id_ = json.loads(raw.decode("utf-8"))
            when = datetime.fromisoformat(at)
        except (binascii.Error, UnicodeDecodeError, ValueError, TypeError, RecursionError):
            raise InvalidCursor("cursor is not one this service gave out") from None
        if when.tzinfo is None or not isinstance(id_, str) or not _cursor_id(id_):
            raise InvalidCursor("cursor is not one this service gave out")
        try:
            return cls(in_utc(when), id_)
        except OutOfRange as exc:
            raise InvalidCursor(f"cursor is not one this service gave out: {exc}") from None


def _cursor_id(id_: str) -> bool:
    """Whether ``id_`` can be a Firestore document id, as every id a cursor names is: the
    store makes a document reference of it (rejected messages)."""
    try:
        size = len(id_.encode("utf-8"))  # a lone surrogate (JSON allows "\\ud800") is no id
    except UnicodeEncodeError:
        return False
    plain = "/" not in id_ and id_ not in (".", "..") and is_document_id(id_)
    return 0 < size <= MAX_CURSOR_ID and plain


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a list, and where the next one starts (None: this is the last)."""

    items: list[T]
    next: Cursor | None = None


@dataclass(frozen=True)
class FlowFilter:
    """Which flows a list shows. Every field narrows it; None leaves it open.

    ``updated_from`` is inclusive and ``updated_to`` exclusive, so consecutive windows never
    show a flow twice. ``labels`` are (key, value) pairs a flow must all carry; the first is
    asked of the index (``label``), the others checked on what it finds (``sifted``).
    """

    flow: str | None = None
    status: Status | None = None
    version: int | None = None
    tenant: str | None = None
    updated_from: datetime | None = None
    updated_to: datetime | None = None
    # A parent flow's key: only its child flows (``ChildFlow`` steps', its ForEach items' too).
    parent: str | None = None
    labels: tuple[tuple[str, str], ...] = ()
    # The result code an ended flow has (``RETRIES_EXHAUSTED``), and the dependency that holds
    # a flow up or failed it (``FlowRecord.dependency``).
    code: str | None = None
    dependency: str | None = None

    def equalities(self) -> list[tuple[str, str | int]]:
        """The ``field == value`` conditions, for a query (a dotted field is inside a map)."""
        status = self.status.value if self.status is not None else None
        fields = (
            ("flow", self.flow),
            ("status", status),
            ("version", self.version),
            ("tenant", self.tenant),
            ("parent_spread", None if self.parent is None else parent_spread(self.parent)),
            ("result.code", self.code),
            ("dependency", self.dependency),
        )
        return [(name, value) for name, value in fields if value is not None]

    @property
    def label(self) -> str | None:
        """The label a query asks of the index, as indexed (``key=value``), or None."""
        return label_rules.entry(*self.labels[0]) if self.labels else None

    @property
    def sifted(self) -> bool:
        """Whether a list checks labels on the flows its query finds (it has more than one)."""
        return len(self.labels) > 1

    def carries(self, labels: Mapping[str, str] | None) -> bool:
        """Whether a flow with ``labels`` carries every label of the filter."""
        found = labels or {}
        return all(found.get(key) == value for key, value in self.labels)

    def without_status(self) -> FlowFilter:
        """The same list over every status (what the counts per status are taken over)."""
        return replace(self, status=None)

    def counted(self) -> FlowFilter:
        """``without_status``, if a count can ask it: Uncountable for more than one label
        (a count reads no document to check the others on)."""
        if self.sifted:
            raise Uncountable(
                "flows are counted by one label at most (a count asks the index one label); "
                "the list itself checks the others"
            )
        return self.without_status()

    def matches(self, record: FlowRecord) -> bool:
        """Whether ``record`` is in the list (what a query with this filter returns)."""
        return (
            all(_value_of(record, name) == value for name, value in self.equalities())
            and self.carries(record.labels)
            and (self.updated_from is None or record.updated_at >= self.updated_from)
            and (self.updated_to is None or record.updated_at < self.updated_to)
        )

    def asked(self, record: FlowRecord) -> bool:
        """Whether a query with this filter finds ``record``: ``matches`` but for the labels
        after the first, which are checked on what it finds."""
        return replace(self, labels=self.labels[:1]).matches(record)


def _value_of(record: FlowRecord, name: str) -> Any:
    """A document field's value on ``record`` (``result.code``: None until it ends)."""
    if name == "result.code":
        return record.result.code if record.result is not None else None
    return getattr(record, name)


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class FlowSummary(_Model):
    """What a list shows of a flow; the whole document is ``GET /flows/{id}``."""

    flow_id: str
    flow: str
    version: int = 1
    tenant: str = "default"
    status: Status
    position: str  # e.g. "await_registration poll 3"
    generation: int = 0
    polls: int = 0
    attempts: int = 0
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None
    code: str | None = None  # the result's code, once ended
    cleanup: str | None = None  # the clean-up's state, if it ended with one
    labels: dict[str, str] = {}
    dependency: str | None = None

    @classmethod
    def from_record(cls, record: FlowRecord) -> FlowSummary:
        return cls.from_doc(record.to_doc())

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> FlowSummary:
        """A summary from a flow document, or from its projection on SUMMARY_FIELDS;
        pydantic.ValidationError if it does not parse."""
        position = Position.model_validate(doc.get("position"))
        result = doc.get("result") or {}
        cleanup = doc.get("cleanup") or {}
        return cls.model_validate(
            {
                **{k: v for k, v in doc.items() if k not in ("position", "result", "cleanup")},
                "position": position.label(),
                "generation": position.generation,
                "code": result.get("code") if isinstance(result, dict) else None,
                "cleanup": cleanup.get("state") if isinstance(cleanup, dict) else None,
            }
        )

    def cursor(self) -> Cursor:
        return Cursor(self.updated_at, self.flow_id)


def record_cursor(record: FlowRecord) -> Cursor:
    return Cursor(record.updated_at, record.flow_id)


class RejectedMessage(_Model):
    """A refused start message (or task body), as recorded in ``rejected``, with its reason."""

    id: str
    kind: str = "message"  # "message" (a start message) or "task" (a task body)
    message_id: str | None = None
    task: str | None = None
    reason: str
    rejected_at: datetime
    attributes: dict[str, str] = {}
    data: str = ""  # the bytes as text (undecodable bytes replaced), at most 16 KiB of them
    data_truncated: bool = False
    # What was left out of ``data`` ('' if nothing): a flow's sensitive input fields, redacted,
    # or all of it when its flow could not be told (``core.redaction``); and how large it was.
    redacted: str = ""
    data_bytes: int | None = None

    @classmethod
    def from_doc(cls, doc_id: str, doc: dict[str, Any]) -> RejectedMessage:
        """pydantic.ValidationError if the record does not parse."""
        raw: Any = doc.get("body") or b""
        if doc.get("data_base64"):
            try:
                raw = base64.b64decode(doc["data_base64"], validate=True)
            except (binascii.Error, TypeError, ValueError):
                raw = b""
        text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)
        attributes = doc.get("attributes") or {}
        if isinstance(attributes, list):  # {key, value} pairs: any key Pub/Sub allows
            attributes = {p.get("key"): p.get("value") for p in attributes if isinstance(p, dict)}
        return cls.model_validate({**doc, "id": doc_id, "data": text, "attributes": attributes})

    def cursor(self) -> Cursor:
        return Cursor(self.rejected_at, self.id)


def sifted(
    found: Iterable[T], keep: Callable[[T], bool], *, limit: int, cursor_of: Callable[[T], Cursor]
) -> Page[T]:
    """A page of at most ``limit`` of the items ``found`` (in list order, lazily) that
    ``keep`` admits, reading at most ``limit + 1 + MAX_SIFTED`` of them. A page that ends
    before it is full has a cursor after the last item read, so a later page goes on from
    there; it ends after the last shown item once one more is admitted."""
    shown: list[T] = []
    for read, item in enumerate(found, start=1):
        if keep(item):
            if len(shown) == limit:
                return Page(shown, cursor_of(shown[-1]))
            shown.append(item)
        if read >= limit + 1 + MAX_SIFTED:
            return Page(shown, cursor_of(item))
    return Page(shown)


def paged(items: list[T], limit: int, cursor_of: Any) -> Page[T]:
    """A page of at most ``limit`` from ``items`` (fetched with one extra, to know whether a
    next page exists)."""
    shown = items[:limit]
    more = len(items) > limit
    return Page(shown, cursor_of(shown[-1]) if more and shown else None)


__all__ = [
    "EARLIEST",
    "LATEST",
    "MAX_SIFTED",
    "SUMMARY_FIELDS",
    "Cursor",
    "FlowFilter",
    "FlowSummary",
    "InvalidCursor",
    "OutOfRange",
    "Page",
    "RejectedMessage",
    "Uncountable",
    "in_utc",
    "paged",
    "record_cursor",
    "sifted",
]

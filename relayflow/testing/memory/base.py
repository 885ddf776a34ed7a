"""What every family of the in-memory store shares: documents in their Firestore form, their
versions, the counts and fault injection a test reads and sets, and parsing them back."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError

from relayflow.core.ports import TenantState, Unreadable, UnstorableChange
from relayflow.core.records import FlowRecord

EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


class MemoryBase:
    """The dicts of one in-memory store, shared by its families (each family's class builds on
    this one, so ``MemoryStore`` is one object over one set of dicts)."""

    def __init__(self) -> None:
        self.docs: dict[str, dict[str, Any]] = {}
        self.rejected: dict[str, dict[str, Any]] = {}
        self.versions: dict[str, datetime] = {}
        self.writes = 0
        # Tenants: running slots (id -> holder, free_at) and what operators set.
        self.slots: dict[str, dict[str, Any]] = {}
        self.slot_writes = 0
        self.tenants: dict[str, TenantState] = {}
        # Fault injection: the next N writes fail as an outage would (ConnectionError) ...
        self.failing_writes = 0
        # ... and a document this says is unstorable is refused for good, as Firestore
        # refuses one over its size or index-entry limits (return why, or None to accept).
        self.refuse: Callable[[dict[str, Any]], str | None] = lambda doc: None

    def _records(self) -> list[FlowRecord]:
        return [r for r in self._parsed() if isinstance(r, FlowRecord)]

    def _parsed(self) -> list[FlowRecord | Unreadable]:
        parsed: list[FlowRecord | Unreadable] = []
        for flow_id, doc in self.docs.items():
            try:
                parsed.append(FlowRecord.from_doc(doc))
            except ValidationError as exc:
                parsed.append(Unreadable(flow_id, f"no longer parses: {exc.error_count()} errors"))
        return parsed

    def _write(self, record: FlowRecord) -> None:
        if self.failing_writes:
            self.failing_writes -= 1
            raise ConnectionError("firestore unavailable")
        doc = record.to_doc()
        refused = self.refuse(doc)
        if refused:
            raise UnstorableChange(refused)
        self.writes += 1
        self.docs[record.key] = doc
        self.versions[record.key] = self._version(record.key) + timedelta(microseconds=1)

    def _version(self, flow_id: str) -> datetime:
        return self.versions.get(flow_id, EPOCH)

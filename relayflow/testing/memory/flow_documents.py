"""Flow documents in a dict (``core.ports.FlowDocuments``), each write whole and through its
Firestore form; a conditional write against a stale version is read afresh."""

from __future__ import annotations

import functools

from pydantic import ValidationError

from relayflow.core import planner
from relayflow.core.ports import Change, Snapshot, UnreadableFlow
from relayflow.core.records import FlowRecord
from relayflow.testing.memory.base import MemoryBase


class MemoryFlowDocuments(MemoryBase):
    """Flow documents created, read and changed as Firestore would."""

    def create(self, record: FlowRecord) -> bool:
        if record.key in self.docs:
            return False
        self._write(record)
        return True

    def read(self, flow_id: str) -> Snapshot | None:
        doc = self.docs.get(flow_id)
        if doc is None:
            return None
        try:
            record = FlowRecord.from_doc(doc)
        except ValidationError as exc:
            reason = f"flow {flow_id} no longer parses: {exc.error_count()} errors"
            raise UnreadableFlow(reason) from exc
        return Snapshot(record, self._version(flow_id))

    def get(self, flow_id: str) -> FlowRecord | None:
        found = self.read(flow_id)
        return None if found is None else found.record

    def change(
        self, flow_id: str, change: Change, *, start: Snapshot | None = None
    ) -> FlowRecord | None:
        written = self.change_versioned(flow_id, change, start=start)
        return written.record if written else None

    def change_versioned(
        self, flow_id: str, change: Change, *, start: Snapshot | None = None
    ) -> Snapshot | None:
        # Like the conditional write: a snapshot that is no longer current is read afresh.
        stale = start is None or start.version != self._version(flow_id)
        current = self.read(flow_id) if stale else start
        if current is None:
            return None
        updated = change(current.record)
        if updated is None:
            return None
        self._write(updated)
        return Snapshot(updated, self.versions[flow_id])

    def find(self, flow_id: str, *, limit: int = 10) -> list[FlowRecord]:
        return [r for r in self._records() if r.flow_id == flow_id and not r.is_lane][:limit]

    def mark_published(
        self, flow_id: str, generation: int, *, start: Snapshot | None = None
    ) -> bool:
        mark = functools.partial(planner.published, generation=generation)
        return self.change(flow_id, mark, start=start) is not None

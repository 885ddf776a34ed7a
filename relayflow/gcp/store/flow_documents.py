"""Flow documents in Firestore (``flows/{prefix}:{key}``, a ForEach lane's in ``flow_lanes``,
ids spread by ``keys.document_id``): created if absent, read whole, changed only by
compare-and-set (``core.ports.FlowDocuments``).

A document an earlier release wrote lives at its bare key: a read that finds nothing at the
spread id reads there once (``firestore_legacy_reads`` counts those), and its changes go there;
its first change also gives it its ``shard``, so listings and the sweeper see it."""

from __future__ import annotations

import functools
from typing import Any

from google.api_core.exceptions import (
    Aborted,
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
)
from google.cloud import firestore
from pydantic import ValidationError

from relayflow.core import planner
from relayflow.core.ports import Change, Snapshot, UnreadableFlow, UnstorableChange
from relayflow.core.records import FlowRecord
from relayflow.core.sharding import shard_of
from relayflow.gcp import documents
from relayflow.gcp.store import keys
from relayflow.gcp.store.base import RPC_TIMEOUT_S, StoreBase, first_error

# Each conflict means another writer succeeded; a flow sees a few at once, never dozens.
CHANGE_ATTEMPTS = 32


class FirestoreFlowDocuments(StoreBase):
    """Reads and compare-and-set writes of flow documents."""

    def create(self, record: FlowRecord) -> bool:
        """Create the flow document; False if one with that key exists already (also one an
        earlier release wrote at the legacy id: a start redelivered across the upgrade)."""
        key = record.key
        self._counters.add("firestore_reads")
        if self._docs.get(self._path(key, legacy=True), timeout=RPC_TIMEOUT_S) is not None:
            self._found_legacy(key)
            return False
        doc = {
            **record.to_doc(),
            **keys.shard_field(key, self._shards),
            **keys.find_field(record.flow_id),
            **keys.label_field(record.labels),
        }
        self._counters.add("firestore_writes")
        try:
            self._docs.create(self._path(key), doc, timeout=RPC_TIMEOUT_S)
        except AlreadyExists:
            return False
        return True

    def read(self, flow_id: str) -> Snapshot | None:
        """The flow and its version, or None."""
        self._counters.add("firestore_reads")
        found = self._docs.get(self._path(flow_id), timeout=RPC_TIMEOUT_S)
        if found is None:  # rare: a task for an unknown flow, or one an earlier release wrote
            self._counters.add("firestore_reads")
            found = self._docs.get(self._path(flow_id, legacy=True), timeout=RPC_TIMEOUT_S)
            if found is None:
                return None
            self._found_legacy(flow_id)
        fields, version = found
        try:
            record = FlowRecord.from_doc(fields)
        except ValidationError as exc:
            raise UnreadableFlow(f"flow {flow_id} no longer parses: {first_error(exc)}") from exc
        return Snapshot(record, version, fields)

    def get(self, flow_id: str) -> FlowRecord | None:
        """The flow, or None."""
        found = self.read(flow_id)
        return found.record if found else None

    def change(
        self, flow_id: str, change: Change, *, start: Snapshot | None = None
    ) -> FlowRecord | None:
        """Apply ``change`` to the current record atomically; the new record, or None."""
        written = self.change_versioned(flow_id, change, start=start)
        return written.record if written else None

    def change_versioned(
        self, flow_id: str, change: Change, *, start: Snapshot | None = None
    ) -> Snapshot | None:
        """Apply ``change`` to the current record atomically; the new record and its version.

        Optimistic concurrency: the write carries the update time of the document it was
        computed from, and on a conflict the record is read again and ``change`` called again,
        so ``change`` must be a pure function of its argument. (A read-then-write transaction
        deadlocks when several handlers change one flow at once; the emulator breaks each
        deadlock with a 2 s lock timeout and soon gives up. A precondition never locks.)
        ``start``, a snapshot the caller has just read, saves the first read.
        """
        for _ in range(CHANGE_ATTEMPTS):
            current, start = start or self.read(flow_id), None
            if current is None:
                return None
            updated = change(current.record)
            if updated is None:
                return None
            path = self._path(flow_id)  # after the read: where it found the document
            doc = updated.to_doc()  # every field; only those that changed are sent
            fields, appends = documents.write_of(current.stored, doc)
            if current.stored is not None and "shard" not in current.stored:
                fields["shard"] = shard_of(flow_id, self._shards)  # a legacy document's
            if current.stored is not None and keys.FIND_FIELD not in current.stored:
                fields.update(keys.find_field(updated.flow_id))  # one from before find's field
            if not fields and not appends:  # nothing to write: the document already says it
                return Snapshot(updated, current.version, current.stored)
            self._counters.add("firestore_writes")
            try:
                version, size = self._docs.update(
                    path,
                    fields,
                    unchanged_since=current.version,
                    timeout=RPC_TIMEOUT_S,
                    append=appends,
                )
            except (FailedPrecondition, NotFound):
                # somebody changed (or removed) it since the read: read again
                self._counters.add("firestore_conflicts")
                continue
            except InvalidArgument as exc:  # too large, too many index entries: for good
                raise UnstorableChange(str(exc.message)[:500]) from exc
            self._counters.add("firestore_bytes_written", size)
            shard = fields.get("shard", (current.stored or {}).get("shard"))
            return Snapshot(updated, version, doc if shard is None else {**doc, "shard": shard})
        message = f"flow {flow_id}: {CHANGE_ATTEMPTS} conflicting changes in a row"
        raise Aborted(message)  # type: ignore[no-untyped-call]

    def reference(self, key: str) -> Any:
        """The document of ``key`` for a listener to follow (``relayflow watch``): where it
        lives, an earlier release's legacy id if only that one exists."""
        self._counters.add("firestore_reads")
        spread = self._doc(key)
        if spread.get(timeout=RPC_TIMEOUT_S).exists:
            return spread
        legacy = self._doc(key, legacy=True)
        self._counters.add("firestore_reads")
        if legacy.get(timeout=RPC_TIMEOUT_S).exists:
            self._found_legacy(key)
            return legacy
        return spread

    def find(self, flow_id: str, *, limit: int = 10) -> list[FlowRecord]:
        """Every tenant's flow with the id ``flow_id`` (its field, not its key; a document an
        earlier release wrote is found once ``relayflow migrate-shards`` has given it the field)."""
        value = keys.find_value(flow_id)
        query = self._flows.where(filter=firestore.FieldFilter(keys.FIND_FIELD, "==", value))
        found = list(self._parse(query.limit(limit).stream(timeout=RPC_TIMEOUT_S)))
        self._counters.add("firestore_reads", max(1, len(found)))
        return found

    def mark_published(
        self, flow_id: str, generation: int, *, start: Snapshot | None = None
    ) -> bool:
        """Remember that generation ``generation``'s result event went out; False if the flow
        has moved on since (an operator retried it), so a new generation's event is not lost.
        """

        mark = functools.partial(planner.published, generation=generation)
        return self.change(flow_id, mark, start=start) is not None

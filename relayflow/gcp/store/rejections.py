"""Refused messages and tasks in Firestore: ``rejected/{prefix}:{id}`` (Pub/Sub's message ids
rise, so the id is spread as a flow's is, ``keys.document_id``), apart from the flows
(``core.ports.Rejections``; ``listing`` pages through them, by shard)."""

from __future__ import annotations

from typing import Any

from relayflow.gcp.store import keys
from relayflow.gcp.store.base import RPC_TIMEOUT_S, StoreBase


class FirestoreRejections(StoreBase):
    """The ``rejected`` records, written by id and read back by id."""

    def reject(self, doc_id: str, record: dict[str, Any]) -> None:
        """Record a refused message under its id (idempotent for a redelivery)."""
        self._counters.add("firestore_writes")
        stored = {**record, **keys.shard_field(doc_id, self._shards)}
        self._rejected.document(keys.document_id(doc_id)).set(stored, timeout=RPC_TIMEOUT_S)

    def rejected(self, doc_id: str) -> dict[str, Any] | None:
        """A rejected-message record (also one an earlier release wrote at its bare id), or
        None."""
        for where in (keys.document_id(doc_id), keys.legacy_id(doc_id)):
            self._counters.add("firestore_reads")
            snap = self._rejected.document(where).get(timeout=RPC_TIMEOUT_S)
            if snap.exists:
                found = snap.to_dict() or {}
                found.pop("shard", None)
                return found
        return None

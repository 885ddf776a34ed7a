"""Refused messages and tasks in Firestore: ``rejected/{id}``, apart from the flows
(``core.ports.Rejections``; ``listing`` pages through them)."""

from __future__ import annotations

from typing import Any

from relayflow.gcp.store.base import RPC_TIMEOUT_S, StoreBase


class FirestoreRejections(StoreBase):
    """The ``rejected`` records, written by id and read back by id."""

    def reject(self, doc_id: str, record: dict[str, Any]) -> None:
        """Record a refused message under its id (idempotent for a redelivery)."""
        self._counters.add("firestore_writes")
        self._rejected.document(doc_id).set(record, timeout=RPC_TIMEOUT_S)

    def rejected(self, doc_id: str) -> dict[str, Any] | None:
        """A rejected-message record, or None."""
        self._counters.add("firestore_reads")
        snap = self._rejected.document(doc_id).get(timeout=RPC_TIMEOUT_S)
        return snap.to_dict() if snap.exists else None

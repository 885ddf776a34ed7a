"""The sweeper's queries in Firestore (``core.ports.Recovery``): overdue flows and lanes by
``(status, next_run_at)``, ended ones whose result never went out by ``(result_published,
finished_at)``, and ending a document that no longer parses without parsing it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from google.api_core.exceptions import NotFound
from google.cloud import firestore

from relayflow.core.ports import Unreadable
from relayflow.core.records import FlowRecord
from relayflow.core.state import ACTIVE, CLEANABLE, Status
from relayflow.gcp.store.base import RPC_TIMEOUT_S, StoreBase, fields_of, in_shard


class FirestoreRecovery(StoreBase):
    """What the sweeper finds and ends, across flows and ForEach lanes."""

    def overdue(self, *, cutoff: datetime, limit: int = 100) -> list[FlowRecord | Unreadable]:
        """Active flows (and ended ones whose clean-up runs) whose next task should have run
        before ``cutoff``, most overdue first (and any document there that no longer parses,
        so the sweeper can end it). An ended flow has ``next_run_at`` only while it cleans up,
        so the same (status, next_run_at) index finds those; lanes never clean up."""
        # Per shard, one query of flows (every active or cleanable status: ``in``) and one of
        # lanes, merged by due time.
        collections = (self._flows, self._lanes)
        statuses = (sorted(s.value for s in ACTIVE | CLEANABLE), sorted(s.value for s in ACTIVE))

        def query_of(n: int) -> Any:
            return (
                in_shard(collections[n % 2], n // 2)
                .where(filter=firestore.FieldFilter("status", "in", statuses[n % 2]))
                .where(filter=firestore.FieldFilter("next_run_at", "<", cutoff))
                .order_by("next_run_at")
            )

        snaps = self._merged_over(query_of, 2, key=_field("next_run_at", cutoff), limit=limit)
        return [self._parse_one(snap) for snap in snaps]

    def fail_unreadable(self, flow_id: str, *, reason: str, now: datetime) -> None:
        """End a document that no longer parses FAILED (UNREADABLE) with field updates that
        need no parsing: no task can run it, and left active it would be swept for ever."""
        error = {"code": "UNREADABLE", "message": reason[:1000]}
        fields = {
            "status": Status.FAILED.value,
            "result": {"status": Status.FAILED.value, **error, "data": None, "error": error},
            "next": None,
            "next_run_at": None,
            "claim": None,
            "finished_at": now,
            "updated_at": now,
            "result_published": True,  # nothing can be said on flow-results about it
        }
        self._counters.add("firestore_writes")
        try:
            self._doc(flow_id).update(fields, timeout=RPC_TIMEOUT_S)
        except NotFound:  # an earlier release's document, at its legacy id
            self._found_legacy(flow_id)
            self._doc(flow_id, legacy=True).update(fields, timeout=RPC_TIMEOUT_S)

    def unpublished(self, *, cutoff: datetime, limit: int = 100) -> list[FlowRecord]:
        """Flows that ended before ``cutoff`` whose result event never went out (and ForEach
        lanes that ended without their flow hearing of it)."""
        collections = (self._flows, self._lanes)

        def query_of(n: int) -> Any:
            return (
                in_shard(collections[n % 2], n // 2)
                .where(filter=firestore.FieldFilter("result_published", "==", False))
                .where(filter=firestore.FieldFilter("finished_at", "<", cutoff))
                .order_by("finished_at")
            )

        snaps = self._merged_over(query_of, 2, key=_field("finished_at", cutoff), limit=limit)
        return list(self._parse(snaps))


def _field(name: str, missing: datetime) -> Any:
    def key(snap: Any) -> datetime:
        value: datetime = fields_of(snap).get(name) or missing
        return value

    return key

"""The sweeper's queries in Firestore (``core.ports.Recovery``): overdue flows and lanes by
``(status, next_run_at)``, ended ones whose result never went out by ``(result_published,
finished_at)``, and ending a document that no longer parses without parsing it."""

from __future__ import annotations

import itertools
from datetime import datetime

from google.cloud import firestore

from relayflow.core.ports import Unreadable
from relayflow.core.records import FlowRecord
from relayflow.core.state import ACTIVE, CLEANABLE, Status
from relayflow.gcp.store.base import RPC_TIMEOUT_S, StoreBase


class FirestoreRecovery(StoreBase):
    """What the sweeper finds and ends, across flows and ForEach lanes."""

    def overdue(self, *, cutoff: datetime, limit: int = 100) -> list[FlowRecord | Unreadable]:
        """Active flows (and ended ones whose clean-up runs) whose next task should have run
        before ``cutoff``, most overdue first (and any document there that no longer parses,
        so the sweeper can end it). An ended flow has ``next_run_at`` only while it cleans up,
        so the same (status, next_run_at) index finds those; lanes never clean up."""
        found: list[tuple[datetime, FlowRecord | Unreadable]] = []
        queried = [
            *itertools.product((self._flows, self._lanes), sorted(ACTIVE)),
            *((self._flows, status) for status in sorted(CLEANABLE)),
        ]
        for collection, status in queried:
            query = (
                collection.where(filter=firestore.FieldFilter("status", "==", status.value))
                .where(filter=firestore.FieldFilter("next_run_at", "<", cutoff))
                .order_by("next_run_at")
                .limit(limit)
            )
            for snap in query.stream(timeout=RPC_TIMEOUT_S):
                due = (snap.to_dict() or {}).get("next_run_at") or cutoff
                found.append((due, self._parse_one(snap)))
        self._counters.add("firestore_reads", max(1, len(found)))
        found.sort(key=lambda pair: pair[0])
        return [flow for _, flow in found[:limit]]

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
        self._doc(flow_id).update(fields, timeout=RPC_TIMEOUT_S)

    def unpublished(self, *, cutoff: datetime, limit: int = 100) -> list[FlowRecord]:
        """Flows that ended before ``cutoff`` whose result event never went out (and ForEach
        lanes that ended without their flow hearing of it)."""
        found: list[FlowRecord] = []
        for collection in (self._flows, self._lanes):
            query = (
                collection.where(filter=firestore.FieldFilter("result_published", "==", False))
                .where(filter=firestore.FieldFilter("finished_at", "<", cutoff))
                .order_by("finished_at")
                .limit(limit)
            )
            found += self._parse(query.stream(timeout=RPC_TIMEOUT_S))
        self._counters.add("firestore_reads", max(1, len(found)))
        return found[:limit]

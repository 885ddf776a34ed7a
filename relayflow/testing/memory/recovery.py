"""The sweeper's queries over the in-memory documents (``core.ports.Recovery``), sorted by
``next_run_at`` and ``finished_at`` as Firestore sorts them."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from relayflow.core.ports import Unreadable
from relayflow.core.records import FlowRecord
from relayflow.core.state import ACTIVE, Status
from relayflow.testing.memory.base import MemoryBase


class MemoryRecovery(MemoryBase):
    """Overdue and unpublished flows found; unreadable documents ended."""

    def overdue(self, *, cutoff: datetime, limit: int = 100) -> list[FlowRecord | Unreadable]:
        due: list[FlowRecord | Unreadable] = [
            r
            for r in self._parsed()
            if isinstance(r, Unreadable)
            or (
                (r.status in ACTIVE or r.cleaning)
                and r.next_run_at is not None
                and r.next_run_at < cutoff
            )
        ]
        return sorted(due, key=_due(cutoff))[:limit]

    def fail_unreadable(self, flow_id: str, *, reason: str, now: datetime) -> None:
        doc = self.docs[flow_id]
        error = {"code": "UNREADABLE", "message": reason}
        result = {"status": Status.FAILED.value, **error, "data": None, "error": error}
        doc.update(status=Status.FAILED.value, result=result, next=None, next_run_at=None)
        doc.update(finished_at=now, updated_at=now, claim=None, result_published=True)

    def unpublished(self, *, cutoff: datetime, limit: int = 100) -> list[FlowRecord]:
        ended = [
            r
            for r in self._records()
            if not r.result_published and r.finished_at is not None and r.finished_at < cutoff
        ]
        return sorted(ended, key=lambda r: r.finished_at or cutoff)[:limit]


def _due(cutoff: datetime) -> Callable[[FlowRecord | Unreadable], datetime]:
    def key(found: FlowRecord | Unreadable) -> datetime:
        return found.next_run_at or cutoff if isinstance(found, FlowRecord) else cutoff

    return key

"""What operators list, over the in-memory documents (``core.ports.Listing``), in Firestore's
order: newest update first, ties by id, a page starting after its cursor."""

from __future__ import annotations

from collections.abc import Iterable

from relayflow.core.listing import (
    Cursor,
    FlowFilter,
    FlowSummary,
    Page,
    RejectedMessage,
    paged,
    record_cursor,
    sifted,
)
from relayflow.core.records import FlowRecord
from relayflow.core.state import Status
from relayflow.testing.memory.base import MemoryBase


class MemoryListing(MemoryBase):
    """Pages of flows and of rejected messages; counts of flows by status."""

    def recent(
        self,
        *,
        status: Status | None = None,
        flow: str | None = None,
        version: int | None = None,
        limit: int = 50,
    ) -> list[FlowRecord]:
        chosen = [
            r
            for r in self._records()
            if not r.is_lane
            if status in (None, r.status)
            and flow in (None, r.flow)
            and version in (None, r.version)
        ]
        # As the lists: newest update first, ties by id.
        return sorted(chosen, key=lambda r: (r.updated_at, r.flow_id), reverse=True)[:limit]

    def flows(
        self, filter: FlowFilter, *, after: Cursor | None = None, limit: int = 50
    ) -> Page[FlowRecord]:
        # Firestore's order: updated_at, then id, both descending; a page starts after ``after``.
        # What its query finds, then (as Firestore's listing) the labels past the first checked.
        chosen = sorted(
            (r for r in self._records() if filter.asked(r)),
            key=lambda r: (r.updated_at, r.flow_id),
            reverse=True,
        )
        if after is not None:
            chosen = [r for r in chosen if (r.updated_at, r.flow_id) < (after.at, after.id)]
        return sifted(
            chosen, lambda r: filter.carries(r.labels), limit=limit, cursor_of=record_cursor
        )

    def summaries(
        self, filter: FlowFilter, *, after: Cursor | None = None, limit: int = 50
    ) -> Page[FlowSummary]:
        page = self.flows(filter, after=after, limit=limit)
        return Page([FlowSummary.from_record(r) for r in page.items], page.next)

    def matching(self, filter: FlowFilter, *, limit: int) -> list[FlowRecord]:
        return [r for r in self._records() if not r.is_lane and filter.matches(r)][: limit + 1]

    def count_by_status(
        self, filter: FlowFilter, *, statuses: Iterable[Status] | None = None
    ) -> dict[Status, int]:
        admitted = filter.counted()
        counted = set(Status if statuses is None else statuses)
        counts = dict.fromkeys(Status, 0)
        for record in self._records():
            if record.status in counted and admitted.matches(record):
                counts[record.status] += 1
        return counts

    def rejected_messages(
        self, *, after: Cursor | None = None, limit: int = 50
    ) -> Page[RejectedMessage]:
        found = sorted(
            (RejectedMessage.from_doc(doc_id, doc) for doc_id, doc in self.rejected.items()),
            key=lambda m: (m.rejected_at, m.id),
            reverse=True,
        )
        if after is not None:
            found = [m for m in found if (m.rejected_at, m.id) < (after.at, after.id)]
        return paged(found[: limit + 1], limit, RejectedMessage.cursor)

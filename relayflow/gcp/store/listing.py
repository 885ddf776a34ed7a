"""What operators list, from Firestore (``core.ports.Listing``): flows and rejected messages a
page at a time, newest first, and counts by status.

Each filter combination with the (updated_at, flow_id) order needs a composite index in the
cloud (the emulator needs none); see the README's "Console and operations".
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from google.cloud import firestore
from google.cloud.firestore_v1.field_path import FieldPath
from pydantic import BaseModel, ValidationError

from relayflow.core.listing import (
    SUMMARY_FIELDS,
    Cursor,
    FlowFilter,
    FlowSummary,
    Page,
    RejectedMessage,
)
from relayflow.core.records import FlowRecord
from relayflow.core.state import Status
from relayflow.gcp.store.base import RPC_TIMEOUT_S, StoreBase, fields_of, log

_Item = TypeVar("_Item", bound=BaseModel)


class FirestoreListing(StoreBase):
    """Pages of flows and of rejected messages; counts of flows by status."""

    def recent(
        self,
        *,
        status: Status | None = None,
        flow: str | None = None,
        version: int | None = None,
        limit: int = 50,
    ) -> list[FlowRecord]:
        """Flows, newest update first, optionally of one status, flow and version."""
        query: Any = self._flows
        for field, value in (("status", status), ("flow", flow), ("version", version)):
            if value is not None:
                plain = value.value if isinstance(value, Status) else value
                query = query.where(filter=firestore.FieldFilter(field, "==", plain))
        query = query.order_by("updated_at", direction=firestore.Query.DESCENDING).limit(limit)
        records = [
            FlowRecord.from_doc(s.to_dict() or {}) for s in query.stream(timeout=RPC_TIMEOUT_S)
        ]
        self._counters.add("firestore_reads", max(1, len(records)))
        return records

    def flows(
        self, filter: FlowFilter, *, after: Cursor | None = None, limit: int = 50
    ) -> Page[FlowRecord]:
        """Whole documents of the flows ``filter`` admits, newest update first."""
        query = self._listing(filter, after=after, limit=limit)
        return self._page(query, limit, lambda snap: FlowRecord.from_doc(fields_of(snap)))

    def summaries(
        self, filter: FlowFilter, *, after: Cursor | None = None, limit: int = 50
    ) -> Page[FlowSummary]:
        """``flows`` as summaries, read as a projection: a fraction of each document."""
        query = self._listing(filter, after=after, limit=limit).select(SUMMARY_FIELDS)
        return self._page(query, limit, lambda snap: FlowSummary.from_doc(fields_of(snap)))

    def count_by_status(self, filter: FlowFilter) -> dict[Status, int]:
        """How many flows ``filter`` admits in each status: one count aggregation per status
        (billed one read per 1,000 entries), run side by side."""
        admitted = filter.without_status()

        def count(status: Status) -> int:
            query = self._filtered(admitted).where(
                filter=firestore.FieldFilter("status", "==", status.value)
            )
            (result,) = query.count(alias="n").get(timeout=RPC_TIMEOUT_S)
            return int(result[0].value)

        with ThreadPoolExecutor(max_workers=len(Status)) as pool:
            counts = dict(zip(Status, pool.map(count, Status), strict=True))
        self._counters.add("firestore_reads", len(Status))
        return counts

    def rejected_messages(
        self, *, after: Cursor | None = None, limit: int = 50
    ) -> Page[RejectedMessage]:
        """Refused messages with their reasons, newest first."""
        by_id = FieldPath.document_id()
        query: Any = self._rejected.order_by(
            "rejected_at", direction=firestore.Query.DESCENDING
        ).order_by(by_id, direction=firestore.Query.DESCENDING)
        if after is not None:
            start = {"rejected_at": after.at, by_id: self._rejected.document(after.id)}
            query = query.start_after(start)
        query = query.limit(limit + 1)

        def parse(snap: Any) -> RejectedMessage:
            return RejectedMessage.from_doc(snap.id, fields_of(snap))

        return self._page(query, limit, parse, at_field="rejected_at")

    def _filtered(self, filter: FlowFilter) -> Any:
        query: Any = self._flows
        for field, value in filter.equalities():
            query = query.where(filter=firestore.FieldFilter(field, "==", value))
        bounds = (("updated_at", ">=", filter.updated_from), ("updated_at", "<", filter.updated_to))
        for field, op, bound in bounds:
            if bound is not None:
                query = query.where(filter=firestore.FieldFilter(field, op, bound))
        return query

    def _listing(self, filter: FlowFilter, *, after: Cursor | None, limit: int) -> Any:
        """The query for one page: newest update first, ties by id; one more than ``limit``,
        to know whether a next page exists."""
        descending = firestore.Query.DESCENDING
        query = (
            self._filtered(filter)
            .order_by("updated_at", direction=descending)
            .order_by("flow_id", direction=descending)
        )
        if after is not None:
            query = query.start_after({"updated_at": after.at, "flow_id": after.id})
        return query.limit(limit + 1)

    def _page(
        self,
        query: Any,
        limit: int,
        parse: Callable[[Any], _Item],
        *,
        at_field: str = "updated_at",
    ) -> Page[_Item]:
        """One page of ``query``'s results. A document that does not parse is logged and left
        out, but still counts for where the page ends, so it cannot hide the pages after it."""
        snaps = list(query.stream(timeout=RPC_TIMEOUT_S))
        self._counters.add("firestore_reads", max(1, len(snaps)))
        shown = snaps[:limit]
        items: list[_Item] = []
        for snap in shown:
            try:
                items.append(parse(snap))
            except ValidationError as exc:
                log.error("unreadable document", extra={"doc": snap.id, "error": str(exc)})
        last = shown[-1] if len(snaps) > limit and shown else None
        return Page(items, Cursor(fields_of(last)[at_field], last.id) if last else None)

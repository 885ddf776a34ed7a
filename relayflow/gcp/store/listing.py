"""What operators list, from Firestore (``core.ports.Listing``): flows and rejected messages a
page at a time, newest first, and counts by status.

Each filter combination with the (updated_at, flow_id) order needs a composite index in the
cloud (the emulator needs none); see the README's "Console and operations". ``updated_at``
moves with every write, so it is indexed only behind the ``shard`` field: each list asks every
shard and merges the answers (``relayflow.gcp.store.merge``); a page's cursor is global and
each shard's query starts after it.

A label filter asks ``array-contains`` of the flows' ``label_index`` (``keys.LABEL_FIELD``).
A query may hold one such filter, so a list by several labels asks the first and checks the
others on the flows it finds (``core.listing.sifted``, at most ``MAX_SIFTED`` a page).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from google.cloud import firestore
from google.cloud.firestore_v1.field_path import FieldPath
from pydantic import BaseModel, ValidationError

from relayflow.core.listing import (
    MAX_SIFTED,
    SUMMARY_FIELDS,
    Cursor,
    FlowFilter,
    FlowSummary,
    Page,
    RejectedMessage,
    paged,
    sifted,
)
from relayflow.core.records import FlowRecord
from relayflow.core.state import Status
from relayflow.gcp.store import keys
from relayflow.gcp.store.base import RPC_TIMEOUT_S, StoreBase, fields_of, in_shard, log

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
        chosen: Any = self._flows
        for field, value in (("status", status), ("flow", flow), ("version", version)):
            if value is not None:
                plain = value.value if isinstance(value, Status) else value
                chosen = chosen.where(filter=firestore.FieldFilter(field, "==", plain))
        descending = firestore.Query.DESCENDING

        def query_of(shard: int) -> Any:
            # The lists' order (and their indexes): newest update first, ties by id.
            return (
                in_shard(chosen, shard)
                .order_by("updated_at", direction=descending)
                .order_by("flow_id", direction=descending)
            )

        snaps = self._merged(query_of, key=_listed, limit=limit, descending=True)
        return [FlowRecord.from_doc(fields_of(s)) for s in snaps]

    def flows(
        self, filter: FlowFilter, *, after: Cursor | None = None, limit: int = 50
    ) -> Page[FlowRecord]:
        """Whole documents of the flows ``filter`` admits, newest update first."""
        page = self._listing(filter, after=after, limit=limit)
        return self._parsed(page, lambda snap: FlowRecord.from_doc(fields_of(snap)))

    def summaries(
        self, filter: FlowFilter, *, after: Cursor | None = None, limit: int = 50
    ) -> Page[FlowSummary]:
        """``flows`` as summaries, read as a projection: a fraction of each document."""
        page = self._listing(filter, after=after, limit=limit, fields=SUMMARY_FIELDS)
        return self._parsed(page, lambda snap: FlowSummary.from_doc(fields_of(snap)))

    def matching(self, filter: FlowFilter, *, limit: int) -> list[FlowRecord]:
        """Every flow ``filter`` admits, in no order, at most ``limit`` + 1: each shard's
        query (the lists' own, so their indexes serve it) streamed whole, side by side, none
        merged in order; every stream stops once ``limit`` + 1 are found, so a filter that
        admits millions costs about ``limit`` reads, not millions."""
        filtered = self._filtered(filter)
        descending = firestore.Query.DESCENDING
        found: list[Any] = []
        lock = threading.Lock()

        def scan(shard: int) -> None:
            query = (
                in_shard(filtered, shard)
                .order_by("updated_at", direction=descending)
                .order_by("flow_id", direction=descending)
            )
            for snap in query.stream(timeout=RPC_TIMEOUT_S):
                with lock:
                    if len(found) > limit:
                        return
                    found.append(snap)

        with ThreadPoolExecutor(max_workers=min(self._shards, 16)) as pool:
            list(pool.map(scan, range(self._shards)))
        self._counters.add("firestore_reads", max(1, len(found)))
        # What the query cannot ask (a filter's further conditions) is checked on each.
        return [r for r in self._parse(found[: limit + 1]) if filter.matches(r)]

    def count_by_status(
        self, filter: FlowFilter, *, statuses: Iterable[Status] | None = None
    ) -> dict[Status, int]:
        """How many flows ``filter`` admits in each status (of ``statuses``, if given): one
        count aggregation per status (billed one read per 1,000 entries), run side by side. A
        range on ``updated_at`` is indexed only behind the shard, and so is ``result.code``
        (``result`` keeps no single-field index): with either, each status is counted in every
        shard. Uncountable for more than one label."""
        admitted = filter.counted()
        ranged = filter.updated_from is not None or filter.updated_to is not None
        sharded = ranged or filter.code is not None
        shards: list[int | None] = list(range(self._shards)) if sharded else [None]
        counted = list(Status) if statuses is None else list(dict.fromkeys(statuses))
        asked = [(status, shard) for status in counted for shard in shards]

        def count(pair: tuple[Status, int | None]) -> int:
            status, shard = pair
            query = self._filtered(admitted).where(
                filter=firestore.FieldFilter("status", "==", status.value)
            )
            if shard is not None:
                query = in_shard(query, shard)
            (result,) = query.count(alias="n").get(timeout=RPC_TIMEOUT_S)
            return int(result[0].value)

        counts = dict.fromkeys(Status, 0)
        with ThreadPoolExecutor(max_workers=min(len(asked), 16)) as pool:
            for (status, _), n in zip(asked, pool.map(count, asked), strict=True):
                counts[status] += n
        self._counters.add("firestore_reads", len(asked))
        return counts

    def rejected_messages(
        self, *, after: Cursor | None = None, limit: int = 50
    ) -> Page[RejectedMessage]:
        """Refused messages with their reasons, newest first."""
        by_id = FieldPath.document_id()
        descending = firestore.Query.DESCENDING

        def query_of(shard: int) -> Any:
            query = (
                in_shard(self._rejected, shard)
                .order_by("rejected_at", direction=descending)
                .order_by(by_id, direction=descending)
            )
            if after is not None:
                where = self._rejected.document(keys.document_id(after.id))
                query = query.start_after({"rejected_at": after.at, by_id: where})
            return query

        def order(snap: Any) -> tuple[Any, str]:
            return fields_of(snap)["rejected_at"], snap.id

        snaps = self._merged(query_of, key=order, limit=limit + 1, descending=True)

        def parse(snap: Any) -> RejectedMessage:
            return RejectedMessage.from_doc(keys.key_of(snap.id), fields_of(snap))

        return self._parsed(paged(snaps, limit, _rejected_cursor), parse)

    def _filtered(self, filter: FlowFilter) -> Any:
        query: Any = self._flows
        for field, value in filter.equalities():
            query = query.where(filter=firestore.FieldFilter(field, "==", value))
        if filter.label is not None:
            label = firestore.FieldFilter(keys.LABEL_FIELD, "array_contains", filter.label)
            query = query.where(filter=label)
        bounds = (("updated_at", ">=", filter.updated_from), ("updated_at", "<", filter.updated_to))
        for field, op, bound in bounds:
            if bound is not None:
                query = query.where(filter=firestore.FieldFilter(field, op, bound))
        return query

    def _listing(
        self,
        filter: FlowFilter,
        *,
        after: Cursor | None,
        limit: int,
        fields: tuple[str, ...] | None = None,
    ) -> Page[Any]:
        """One page's documents: newest update first, ties by id, merged over the shards,
        read lazily: one more than ``limit``, to know whether a next page exists, and those
        that labels past the first leave out (at most ``MAX_SIFTED`` more)."""
        descending = firestore.Query.DESCENDING
        filtered = self._filtered(filter)

        def query_of(shard: int) -> Any:
            query = (
                in_shard(filtered, shard)
                .order_by("updated_at", direction=descending)
                .order_by("flow_id", direction=descending)
            )
            if fields is not None:
                query = query.select(fields)
            if after is not None:
                query = query.start_after({"updated_at": after.at, "flow_id": after.id})
            return query

        read = limit + 1 + (MAX_SIFTED if filter.sifted else 0)
        found = self._merging(query_of, key=_listed, limit=read, descending=True)

        def carries(snap: Any) -> bool:
            return filter.carries(fields_of(snap).get("labels"))

        return sifted(found, carries, limit=limit, cursor_of=_flow_cursor)

    def _parsed(self, page: Page[Any], parse: Callable[[Any], _Item]) -> Page[_Item]:
        """``page``'s documents parsed; one that does not parse is logged and left out, but
        the page still ends where it did, so it cannot hide the pages after it."""
        items: list[_Item] = []
        for snap in page.items:
            try:
                items.append(parse(snap))
            except ValidationError as exc:
                log.error("unreadable document", extra={"doc": snap.id, "error": str(exc)})
        return Page(items, page.next)


def _listed(snap: Any) -> tuple[Any, Any]:
    """Where a flow document sorts in a list (descending): its update, then its id."""
    doc = fields_of(snap)
    return doc.get("updated_at"), doc.get("flow_id", "")


def _flow_cursor(snap: Any) -> Cursor:
    doc = fields_of(snap)
    return Cursor(doc["updated_at"], doc["flow_id"])


def _rejected_cursor(snap: Any) -> Cursor:
    return Cursor(fields_of(snap)["rejected_at"], keys.key_of(snap.id))

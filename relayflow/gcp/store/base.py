"""What every family of the Firestore store shares: the client, the collections, the call
bound, the read counters, and turning query results into flow records."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from google.cloud import firestore
from pydantic import ValidationError

from relayflow.core.ports import Unreadable
from relayflow.core.records import FlowRecord
from relayflow.gcp import documents
from relayflow.gcp.store import keys, merge
from relayflow.settings import Settings
from relayflow.telemetry import Counters
from relayflow.topology import load_topology

# One logger for the whole store, whichever family logs.
log = logging.getLogger("relayflow.gcp.store")

# Every call is bounded: a handler must answer well inside its Cloud Tasks dispatch deadline
# (and the start function inside its Pub/Sub ack deadline) rather than hang on a dead backend.
RPC_TIMEOUT_S = 15.0


def build_client(settings: Settings) -> firestore.Client:
    """A Firestore client; the library itself honours FIRESTORE_EMULATOR_HOST."""
    return firestore.Client(project=settings.project_id)


class StoreBase:
    """The collections of one store, shared by its families (each family's class builds on
    this one, so ``FlowStore`` is one object over one client)."""

    def __init__(
        self,
        client: firestore.Client,
        *,
        flows: str = "flows",
        rejected: str = "rejected",
        lanes: str = "flow_lanes",
        slots: str = "tenant_slots",
        tenants: str = "tenants",
        counters: Counters | None = None,
        shards: int | None = None,
    ) -> None:
        """``shards``: the index shards (Settings.firestore_shards; the topology's count when
        None). Queries ask every shard below it, so it may grow, never shrink."""
        self._client = client
        self._shards = load_topology().firestore.shards if shards is None else shards
        if not 1 <= self._shards <= 1024:
            raise ValueError(f"firestore shards must be 1..1024, not {self._shards}")
        # Keys found at their legacy id (a document an earlier release wrote): changes go
        # where the document lives.
        self._legacy: set[str] = set()
        self._legacy_lock = threading.Lock()
        self._docs = documents.Documents(client)
        self._flows = client.collection(flows)
        # ForEach lanes live apart: listings of flows never see them; the sweeper does.
        self._lanes = client.collection(lanes)
        # Tenants: one document per running slot, one per tenant an operator paused.
        self._slots = client.collection(slots)
        self._tenants = client.collection(tenants)
        self._rejected = client.collection(rejected)
        self._counters = counters or Counters()

    @property
    def client(self) -> firestore.Client:
        return self._client

    @property
    def shards(self) -> int:
        return self._shards

    def _collection_of(self, key: str) -> Any:
        """Where a flow's document lives, or a ForEach lane's (its key has dots)."""
        return self._lanes if keys.is_lane(key) else self._flows

    def _doc_id(self, key: str) -> str:
        """The id ``key``'s document lives under: its spread id, or its legacy id where a
        read found it there."""
        with self._legacy_lock:
            legacy = key in self._legacy
        return keys.legacy_id(key) if legacy else keys.document_id(key)

    def _found_legacy(self, key: str) -> None:
        self._counters.add("firestore_legacy_reads")
        with self._legacy_lock:
            self._legacy.add(key)

    def _path(self, key: str, *, legacy: bool = False) -> str:
        """A flow's (or ForEach lane's) document path: where it lives, or its legacy one."""
        doc_id = keys.legacy_id(key) if legacy else self._doc_id(key)
        return self._docs.path(self._collection_of(key).id, doc_id)

    def _doc(self, key: str, *, legacy: bool = False) -> Any:
        """A flow's (or ForEach lane's) document: where it lives, or its legacy one."""
        doc_id = keys.legacy_id(key) if legacy else self._doc_id(key)
        return self._collection_of(key).document(doc_id)

    def _merged(
        self,
        query_of: Callable[[int], Any],
        *,
        key: Callable[[Any], Any],
        limit: int,
        descending: bool = False,
    ) -> list[Any]:
        """The first ``limit`` results of ``query_of(shard)`` over every shard, merged in
        the order ``key`` (each shard's query is ordered by it)."""
        return self._merged_over(query_of, 1, key=key, limit=limit, descending=descending)

    def _merging(
        self,
        query_of: Callable[[int], Any],
        *,
        key: Callable[[Any], Any],
        limit: int,
        descending: bool = False,
    ) -> Iterator[Any]:
        """``_merged``, read as it is taken (``merge.merging``): ``limit`` bounds each
        request, not what is taken."""
        return merge.merging(
            [query_of(shard) for shard in range(self._shards)],
            key=key,
            limit=limit,
            descending=descending,
            counters=self._counters,
            timeout=RPC_TIMEOUT_S,
        )

    def _merged_over(
        self,
        query_of: Callable[[int], Any],
        per_shard: int,
        *,
        key: Callable[[Any], Any],
        limit: int,
        descending: bool = False,
    ) -> list[Any]:
        """``_merged`` of ``per_shard`` queries a shard: ``query_of(n)`` for n below
        ``shards x per_shard`` (shard ``n // per_shard``)."""
        queries = [query_of(n) for n in range(self._shards * per_shard)]
        return merge.merged(
            queries,
            key=key,
            limit=limit,
            descending=descending,
            counters=self._counters,
            timeout=RPC_TIMEOUT_S,
        )

    def _parse(self, snapshots: Iterable[Any]) -> Iterator[FlowRecord]:
        """Records from query results; one that no longer parses is logged and skipped, so a
        single bad document cannot stop a listing."""
        for snap in snapshots:
            parsed = self._parse_one(snap)
            if isinstance(parsed, FlowRecord):
                yield parsed

    def _parse_one(self, snap: Any) -> FlowRecord | Unreadable:
        try:
            return FlowRecord.from_doc(snap.to_dict() or {})
        except ValidationError as exc:
            log.error("unreadable flow document", extra={"doc": snap.id, "error": str(exc)})
            return Unreadable(
                flow_id=keys.key_of(snap.id), reason=f"no longer parses: {first_error(exc)}"
            )


def in_shard(query: Any, shard: int) -> Any:
    """``query`` narrowed to one index shard."""
    return query.where(filter=firestore.FieldFilter("shard", "==", shard))


def fields_of(snap: Any) -> dict[str, Any]:
    """A query result's fields (none, for a document that is gone)."""
    return snap.to_dict() or {}


def first_error(error: ValidationError) -> str:
    """The first of a validation's errors, where it is and how many there are."""
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "document"
    return f"{where}: {first['msg']} ({error.error_count()} errors)"

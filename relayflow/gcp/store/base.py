"""What every family of the Firestore store shares: the client, the collections, the call
bound, the read counters, and turning query results into flow records."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any

from google.cloud import firestore
from pydantic import ValidationError

from relayflow.core.ports import Unreadable
from relayflow.core.records import FlowRecord
from relayflow.gcp import documents
from relayflow.settings import Settings
from relayflow.telemetry import Counters

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
    ) -> None:
        self._client = client
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

    def _path(self, flow_id: str) -> str:
        """A flow's document path, or a ForEach lane's (its id has dots)."""
        collection = self._lanes if "." in flow_id else self._flows
        return self._docs.path(collection.id, flow_id)

    def _doc(self, flow_id: str) -> Any:
        """A flow's document, or a ForEach lane's (its id has dots)."""
        collection = self._lanes if "." in flow_id else self._flows
        return collection.document(flow_id)

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
            return Unreadable(flow_id=snap.id, reason=f"no longer parses: {first_error(exc)}")


def fields_of(snap: Any) -> dict[str, Any]:
    """A query result's fields (none, for a document that is gone)."""
    return snap.to_dict() or {}


def first_error(error: ValidationError) -> str:
    """The first of a validation's errors, where it is and how many there are."""
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "document"
    return f"{where}: {first['msg']} ({error.error_count()} errors)"

"""Bulk actions in Firestore (``core.bulk_state.BulkStore``): ``bulk_actions/{id}``, and each
one's rows in chunk documents ``bulk_actions/{id}/bulk_rows/{chunk}``.

Writes, and why they stay within Firestore's limits: a bulk action's document is written once
per batch (progress and cursor, compare-and-set on its update time), and batches are at least
2 s apart (``core.bulk``): half the sustained one write a second a document takes
(https://firebase.google.com/docs/firestore/best-practices#hotspots). A chunk is written when
the dry run stores it and once per batch of its rows. Bulk ids are random hex (``bulk-`` and 12
digits), so documents spread over the key space; chunk ids are sequential, but a bulk action
writes at most 100 of them, once each, in its dry run (far inside the 500 writes a second a new
collection starts at: https://firebase.google.com/docs/firestore/best-practices#ramping_up_traffic).
The rows' lists and the document's maps are exempt from indexing (Terraform:
``infra/terraform/modules/relayflow``), so a chunk of 100 rows is one write, not thousands
of index entries; ``state`` and ``created_at`` keep theirs (the sweeper's and the list's
queries).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from google.api_core.exceptions import AlreadyExists, FailedPrecondition, NotFound
from google.cloud import firestore
from pydantic import ValidationError

from relayflow.core.bulk_state import BulkAction, BulkRow, BulkState
from relayflow.gcp.store import RPC_TIMEOUT_S
from relayflow.telemetry import Counters

BULK_COLLECTION = "bulk_actions"
ROWS_COLLECTION = "bulk_rows"
# Writes per batched commit when the dry run stores its chunks (Firestore takes 500).
COMMIT_SIZE = 100


class FirestoreBulkActions:
    """``core.bulk_state.BulkStore`` over one Firestore collection and its chunks."""

    def __init__(
        self,
        client: firestore.Client,
        *,
        collection: str = BULK_COLLECTION,
        rows: str = ROWS_COLLECTION,
        counters: Counters | None = None,
    ) -> None:
        self._client = client
        self._actions = client.collection(collection)
        self._rows = rows
        self._counters = counters or Counters()

    def create(
        self, action: BulkAction, chunks: Sequence[Sequence[BulkRow]], *, rows_expire_at: datetime
    ) -> None:
        ref = self._actions.document(action.id)
        for first in range(0, len(chunks), COMMIT_SIZE):
            batch = self._client.batch()
            for n, rows in enumerate(chunks[first : first + COMMIT_SIZE], first):
                batch.set(self._chunk(ref, n), {**_rows_doc(rows), "expire_at": rows_expire_at})
            batch.commit(timeout=RPC_TIMEOUT_S)
        self._counters.add("firestore_writes", len(chunks) + 1)
        ref.create(action.to_doc(), timeout=RPC_TIMEOUT_S)

    def read(self, bulk_id: str) -> BulkAction | None:
        snap = self._actions.document(bulk_id).get(timeout=RPC_TIMEOUT_S)
        self._counters.add("firestore_reads")
        if not snap.exists:
            return None
        return BulkAction.from_doc(snap.to_dict() or {}, snap.update_time)

    def write(self, action: BulkAction) -> bool:
        ref = self._actions.document(action.id)
        self._counters.add("firestore_writes")
        option = self._client.write_option(last_update_time=action.version)
        try:
            ref.update(action.to_doc(), option=option, timeout=RPC_TIMEOUT_S)
        except (AlreadyExists, FailedPrecondition, NotFound):
            self._counters.add("firestore_conflicts")
            return False
        return True

    def recent(self, *, limit: int = 50) -> list[BulkAction]:
        query = self._actions.order_by("created_at", direction=firestore.Query.DESCENDING)
        return self._parsed(query.limit(limit))

    def running(self, *, limit: int = 100) -> list[BulkAction]:
        running = firestore.FieldFilter("state", "==", BulkState.RUNNING.value)
        return self._parsed(self._actions.where(filter=running).limit(limit))

    def rows(self, bulk_id: str, chunk: int) -> tuple[list[BulkRow], Any]:
        snap = self._chunk(self._actions.document(bulk_id), chunk).get(timeout=RPC_TIMEOUT_S)
        self._counters.add("firestore_reads")
        if not snap.exists:
            return [], None
        found = (snap.to_dict() or {}).get("rows") or []
        return [BulkRow.model_validate(row) for row in found], snap.update_time

    def write_rows(self, bulk_id: str, chunk: int, rows: Sequence[BulkRow], version: Any) -> bool:
        ref = self._chunk(self._actions.document(bulk_id), chunk)
        self._counters.add("firestore_writes")
        try:
            option = self._client.write_option(last_update_time=version)
            ref.update(_rows_doc(rows), option=option, timeout=RPC_TIMEOUT_S)
        except (FailedPrecondition, NotFound):
            self._counters.add("firestore_conflicts")
            return False
        return True

    def _chunk(self, ref: Any, n: int) -> Any:
        return ref.collection(self._rows).document(f"c{n:04d}")

    def _parsed(self, query: Any) -> list[BulkAction]:
        found = []
        for snap in query.stream(timeout=RPC_TIMEOUT_S):
            try:
                found.append(BulkAction.from_doc(snap.to_dict() or {}, snap.update_time))
            except ValidationError:
                continue  # a document this release cannot read: left out of lists
        self._counters.add("firestore_reads", max(1, len(found)))
        return found


def _rows_doc(rows: Sequence[BulkRow]) -> dict[str, Any]:
    return {"rows": [row.model_dump(mode="python") for row in rows]}

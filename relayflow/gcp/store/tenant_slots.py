"""A limited tenant's running slots in Firestore (``tenant_slots/{prefix}:{tenant}.{n}``, ids
spread as flows' are, ``keys.document_id``; an earlier release's ``{tenant}.{n}`` are used as
they are; one document per slot, taken and given back by writes conditioned on their version)
and the flows waiting for one, asked of every shard (``core.ports.TenantSlots``)."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

from google.api_core.exceptions import AlreadyExists, FailedPrecondition, NotFound
from google.cloud import firestore

from relayflow.core.ports import SlotGrant
from relayflow.core.records import FlowRecord
from relayflow.core.state import Status
from relayflow.gcp.store import keys
from relayflow.gcp.store.base import RPC_TIMEOUT_S, StoreBase, in_shard


class FirestoreTenantSlots(StoreBase):
    """Slots taken, handed over and given back; waiting flows listed and counted."""

    def acquire_slot(
        self, tenant: str, *, slots: int, holder: str, now: datetime, cooldown_s: float
    ) -> SlotGrant:
        """A free slot taken by a write conditioned on its version (a rival taking it first
        makes this try the next); slot documents are made on first use."""
        query = self._slots.where(filter=firestore.FieldFilter("tenant", "==", tenant))
        known = list(query.stream(timeout=RPC_TIMEOUT_S))
        self._counters.add("firestore_reads", max(1, len(known)))
        taken = {"holder": holder, "taken_at": now, "free_at": now + timedelta(seconds=cooldown_s)}
        resting: list[datetime] = []
        free = []
        for snap in known:
            doc = snap.to_dict() or {}
            if doc.get("holder") is not None or int(doc.get("slot", slots)) >= slots:
                continue  # held, or beyond the tenant's limit (it was lowered)
            free_at = doc.get("free_at")
            if free_at is not None and free_at > now:
                resting.append(free_at)
            else:
                free.append(snap)
        random.shuffle(free)  # rivals start at different slots
        for snap in free:
            option = self._client.write_option(last_update_time=snap.update_time)
            try:
                self._counters.add("firestore_writes")
                snap.reference.update(taken, option=option, timeout=RPC_TIMEOUT_S)
                return SlotGrant(snap.id)
            except (FailedPrecondition, NotFound):
                self._counters.add("firestore_conflicts")
        numbers = {int((s.to_dict() or {}).get("slot", -1)) for s in known}
        for k in (n for n in range(slots) if n not in numbers):
            slot_id = keys.document_id(f"{tenant}.{k}")
            try:
                self._counters.add("firestore_writes")
                self._slots.document(slot_id).create(
                    {"tenant": tenant, "slot": k, **taken}, timeout=RPC_TIMEOUT_S
                )
                return SlotGrant(slot_id)
            except AlreadyExists:
                self._counters.add("firestore_conflicts")
        return SlotGrant(None, min(resting, default=None))

    def release_slot(self, slot: str, *, holder: str) -> bool:
        """Give back ``holder``'s slot; False if it does not hold it (released already)."""
        ref = self._slots.document(slot)
        snap = ref.get(timeout=RPC_TIMEOUT_S)
        self._counters.add("firestore_reads")
        if not snap.exists or (snap.to_dict() or {}).get("holder") != holder:
            return False
        option = self._client.write_option(last_update_time=snap.update_time)
        try:
            self._counters.add("firestore_writes")
            ref.update({"holder": None}, option=option, timeout=RPC_TIMEOUT_S)
        except (FailedPrecondition, NotFound):
            return False
        return True

    def hand_over_slot(
        self, slot: str, *, holder: str, to: str, now: datetime, cooldown_s: float
    ) -> bool:
        """Pass ``holder``'s slot to flow ``to`` by one conditional write; False if ``holder``
        no longer holds it or it still rests."""
        ref = self._slots.document(slot)
        snap = ref.get(timeout=RPC_TIMEOUT_S)
        self._counters.add("firestore_reads")
        doc = snap.to_dict() or {} if snap.exists else {}
        free_at = doc.get("free_at")
        if doc.get("holder") != holder or (free_at is not None and free_at > now):
            return False
        taken = {"holder": to, "taken_at": now, "free_at": now + timedelta(seconds=cooldown_s)}
        option = self._client.write_option(last_update_time=snap.update_time)
        try:
            self._counters.add("firestore_writes")
            ref.update(taken, option=option, timeout=RPC_TIMEOUT_S)
        except (FailedPrecondition, NotFound):
            self._counters.add("firestore_conflicts")
            return False
        return True

    def waiting(self, tenant: str | None = None, *, limit: int = 10) -> list[FlowRecord]:
        """Flows waiting for room (of ``tenant``), those queued first first."""
        query: Any = self._flows.where(filter=firestore.FieldFilter("admission", "==", "waiting"))
        if tenant is not None:
            query = query.where(filter=firestore.FieldFilter("tenant", "==", tenant))

        def query_of(shard: int) -> Any:
            return in_shard(query, shard).order_by("queued_at")

        def queued(snap: Any) -> Any:
            return (snap.to_dict() or {}).get("queued_at")

        snaps = self._merged(query_of, key=queued, limit=limit)
        return [r for r in self._parse(snaps) if r.status is Status.PENDING]

    def count_waiting(self, tenant: str) -> int:
        """How many of ``tenant``'s flows wait for room: one count aggregation (equalities
        only, no time: it needs no shard)."""
        query: Any = self._flows.where(
            filter=firestore.FieldFilter("admission", "==", "waiting")
        ).where(filter=firestore.FieldFilter("tenant", "==", tenant))
        (result,) = query.count(alias="n").get(timeout=RPC_TIMEOUT_S)
        self._counters.add("firestore_reads")
        return int(result[0].value)

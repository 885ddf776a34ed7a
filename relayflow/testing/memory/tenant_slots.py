"""A limited tenant's running slots in a dict, and the flows waiting for one
(``core.ports.TenantSlots``)."""

from __future__ import annotations

from datetime import datetime, timedelta

from relayflow.core.ports import SlotGrant
from relayflow.core.records import FlowRecord
from relayflow.core.state import Status
from relayflow.testing.memory.base import EPOCH, MemoryBase


class MemoryTenantSlots(MemoryBase):
    """Slots taken, handed over and given back; waiting flows listed and counted."""

    def acquire_slot(
        self, tenant: str, *, slots: int, holder: str, now: datetime, cooldown_s: float
    ) -> SlotGrant:
        resting: list[datetime] = []
        for k in range(slots):
            slot_id = f"{tenant}.{k}"
            held = self.slots.setdefault(slot_id, {"holder": None, "free_at": EPOCH})
            if held["holder"] is not None:
                continue
            if held["free_at"] > now:
                resting.append(held["free_at"])
                continue
            free_at = now + timedelta(seconds=cooldown_s)
            self.slots[slot_id] = {"holder": holder, "free_at": free_at}
            self.slot_writes += 1
            return SlotGrant(slot_id)
        return SlotGrant(None, min(resting, default=None))

    def release_slot(self, slot: str, *, holder: str) -> bool:
        held = self.slots.get(slot)
        if held is None or held["holder"] != holder:
            return False
        self.slots[slot] = {**held, "holder": None}
        self.slot_writes += 1
        return True

    def hand_over_slot(
        self, slot: str, *, holder: str, to: str, now: datetime, cooldown_s: float
    ) -> bool:
        held = self.slots.get(slot)
        if held is None or held["holder"] != holder or held["free_at"] > now:
            return False
        self.slots[slot] = {"holder": to, "free_at": now + timedelta(seconds=cooldown_s)}
        self.slot_writes += 1
        return True

    def waiting(self, tenant: str | None = None, *, limit: int = 10) -> list[FlowRecord]:
        found = [
            r
            for r in self._records()
            if r.admission == "waiting"
            and r.status is Status.PENDING
            and tenant in (None, r.tenant)
        ]
        return sorted(found, key=lambda r: (r.queued_at or EPOCH, r.flow_id))[:limit]

    def count_waiting(self, tenant: str) -> int:
        return len(self.waiting(tenant, limit=len(self._records()) + 1))

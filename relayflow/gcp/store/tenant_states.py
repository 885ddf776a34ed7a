"""What operators set on tenants, in Firestore: ``tenants/{tenant}``, one document per tenant
an operator ever paused or resumed (``core.ports.TenantStates``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from relayflow.core.ports import TenantState
from relayflow.gcp.store.base import RPC_TIMEOUT_S, StoreBase


class FirestoreTenantStates(StoreBase):
    """Tenants' paused state, read, set and listed."""

    def tenant_state(self, tenant: str) -> TenantState:
        """What operators set on ``tenant`` (not paused, if nothing)."""
        snap = self._tenants.document(tenant).get(timeout=RPC_TIMEOUT_S)
        self._counters.add("firestore_reads")
        return _state(tenant, snap.to_dict() or {} if snap.exists else {})

    def set_tenant_state(self, state: TenantState) -> None:
        """Pause or resume a tenant."""
        self._counters.add("firestore_writes")
        body: dict[str, Any] = {"paused": state.paused, "by": state.by, "reason": state.reason}
        if state.at is not None:
            body["at"] = state.at
        self._tenants.document(state.tenant).set(body, timeout=RPC_TIMEOUT_S)

    def tenant_states(self) -> list[TenantState]:
        """Every tenant an operator ever paused or resumed."""
        found = [
            _state(snap.id, snap.to_dict() or {})
            for snap in self._tenants.stream(timeout=RPC_TIMEOUT_S)
        ]
        self._counters.add("firestore_reads", max(1, len(found)))
        return found


def _state(tenant: str, doc: dict[str, Any]) -> TenantState:
    at = doc.get("at")  # absent on documents written before it was kept
    return TenantState(
        tenant,
        bool(doc.get("paused")),
        str(doc.get("by", "")),
        str(doc.get("reason", "")),
        at if isinstance(at, datetime) else None,
    )

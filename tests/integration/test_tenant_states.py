"""relayflow.gcp.store.tenant_states against the Firestore emulator: operators' paused state,
kept per tenant."""

from __future__ import annotations

from relayflow.core.ports import TenantState
from relayflow.gcp.store import FlowStore


def test_an_operators_pause_is_kept_per_tenant(flow_store: FlowStore) -> None:
    assert flow_store.tenant_state("acme") == TenantState("acme")
    flow_store.set_tenant_state(TenantState("acme", True, "op@x", "their API is down"))
    assert flow_store.tenant_state("acme") == TenantState("acme", True, "op@x", "their API is down")
    assert [s.tenant for s in flow_store.tenant_states()] == ["acme"]

"""relayflow.gcp.store.tenant_states against the Firestore emulator: operators' paused state,
kept per tenant with who set it, why and when."""

from __future__ import annotations

from datetime import UTC, datetime

from relayflow.core.ports import TenantState
from relayflow.gcp.store import FlowStore


def test_an_operators_pause_is_kept_per_tenant(flow_store: FlowStore) -> None:
    assert flow_store.tenant_state("acme") == TenantState("acme")
    at = datetime(2026, 12, 3, 9, 30, 15, 250000, tzinfo=UTC)
    paused = TenantState("acme", True, "op@x", "their API is down", at)
    flow_store.set_tenant_state(paused)
    assert flow_store.tenant_state("acme") == paused  # who, why, and when
    assert [s.tenant for s in flow_store.tenant_states()] == ["acme"]

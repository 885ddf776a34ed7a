"""What operators set on tenants, in a dict (``core.ports.TenantStates``)."""

from __future__ import annotations

from relayflow.core.ports import TenantState
from relayflow.testing.memory.base import MemoryBase


class MemoryTenantStates(MemoryBase):
    """Tenants' paused state, read, set and listed."""

    def tenant_state(self, tenant: str) -> TenantState:
        return self.tenants.get(tenant, TenantState(tenant))

    def set_tenant_state(self, state: TenantState) -> None:
        self.tenants[state.tenant] = state

    def tenant_states(self) -> list[TenantState]:
        return sorted(self.tenants.values(), key=lambda t: t.tenant)

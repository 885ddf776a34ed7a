"""Tenancy: pausing and resuming a tenant, and what each tenant's policy and state are now.

Admission itself (slots, waiting flows, hand-overs) is ``relayflow.core.admission``; the
engine admits through ``Kernel.admit`` whenever a flow starts, waits or ends.
"""

from __future__ import annotations

from typing import Any

from relayflow.core.engine.kernel import Kernel
from relayflow.core.listing import FlowFilter
from relayflow.core.ports import TenantState
from relayflow.core.state import ACTIVE
from relayflow.core.tenants import DEFAULT_TENANT


class Tenancy:
    """Operators' view of tenants, and their pause switch."""

    def __init__(self, kernel: Kernel) -> None:
        self._k = kernel

    def pause(self, tenant: str, *, by: str, reason: str) -> TenantState:
        """Stop dispatching ``tenant``'s flows (their tasks are put off) and admitting new ones."""
        return self._k.admission.set_paused(tenant, True, by=by, reason=reason)

    def resume(self, tenant: str, *, by: str, reason: str) -> TenantState:
        """Let ``tenant``'s flows go on where they were, and admit its waiting ones."""
        state = self._k.admission.set_paused(tenant, False, by=by, reason=reason)
        self._k.admit(tenant)
        return state

    def views(self) -> list[dict[str, Any]]:
        """Every tenant with a policy or a state: its limits, paused or not, flows waiting."""
        store, tenants = self._k.store, self._k.admission.tenants
        names = set(tenants.tenants) | {s.tenant for s in store.tenant_states()}
        views = []
        for name in sorted(names | {DEFAULT_TENANT}):
            policy = tenants.policy(name)
            state = store.tenant_state(name)
            counts = store.count_by_status(FlowFilter(tenant=name))
            waiting = store.count_waiting(name)
            views.append(
                {
                    "tenant": name,
                    **policy.model_dump(),
                    "paused": policy.paused or state.paused,
                    "paused_by": state.by,
                    "reason": state.reason,
                    "waiting": waiting,
                    "running": sum(counts[s] for s in ACTIVE) - waiting,
                }
            )
        return views

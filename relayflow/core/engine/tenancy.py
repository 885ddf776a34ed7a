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
from relayflow.core.tenants import DEFAULT_TENANT, TenantPolicy


class Tenancy:
    """Operators' view of tenants, and their pause switch."""

    def __init__(self, kernel: Kernel) -> None:
        self._k = kernel

    def pause(self, tenant: str, *, by: str, reason: str) -> TenantState:
        """Stop dispatching ``tenant``'s flows (their tasks are put off) and admitting new ones."""
        return self._k.admission.set_paused(
            tenant, True, by=by, reason=reason, at=self._k.clock.now()
        )

    def resume(self, tenant: str, *, by: str, reason: str) -> TenantState:
        """Let ``tenant``'s flows go on where they were, and admit its waiting ones."""
        state = self._k.admission.set_paused(
            tenant, False, by=by, reason=reason, at=self._k.clock.now()
        )
        self._k.admit(tenant)
        return state

    def views(self) -> list[dict[str, Any]]:
        """Every tenant with a policy or a state: its limits, paused or not (by whom, why and
        since when), flows running and waiting."""
        store, tenants = self._k.store, self._k.admission.tenants
        states = {s.tenant: s for s in store.tenant_states()}
        views = []
        for name in sorted(set(tenants.tenants) | set(states) | {DEFAULT_TENANT}):
            counts = store.count_by_status(FlowFilter(tenant=name))
            waiting = store.count_waiting(name)
            running = sum(counts[s] for s in ACTIVE) - waiting
            state = states.get(name, TenantState(name))
            views.append(_view(tenants.policy(name), state, running=running, waiting=waiting))
        return views


def _view(
    policy: TenantPolicy, state: TenantState, *, running: int, waiting: int
) -> dict[str, Any]:
    return {
        "tenant": state.tenant,
        **policy.model_dump(),
        "paused": policy.paused or state.paused,
        # Paused in RELAYFLOW_TENANTS: an operator's resume does not lift that.
        "configured_paused": policy.paused,
        # The operator who last paused or resumed it, why, and when.
        "paused_by": state.by,
        "reason": state.reason,
        "since": state.at.isoformat() if state.at else None,
        "waiting": waiting,
        "running": running,
    }

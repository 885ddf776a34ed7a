"""Tenants at run time: admitting waiting flows as room frees up, and putting off the tasks of a
paused tenant. The engine calls these at a flow's start, at its end, on a waiting flow's retry
task, and from the sweeper.

A limited tenant has ``max_running`` slots, one Firestore document each: a flow takes one to
run and gives it back when it ends, so starts and ends of one tenant spread over its slots
rather than contending for one counter. A slot rests ``max_running / starts_per_s`` after it
is taken, which keeps starts under the tenant's rate. Flows that find no slot wait, and are
admitted oldest first: by the flow that frees a slot, by their own retry task when a slot has
only been resting, or by the sweeper.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from relayflow.core import planner
from relayflow.core.planner import Plan
from relayflow.core.ports import FlowDocuments, TenantSlots, TenantState, TenantStates
from relayflow.core.records import FlowRecord
from relayflow.core.tenants import Tenants

log = logging.getLogger("relayflow.admission")
# Tasks of a paused tenant are put off this long at a time, then look again.
PAUSE_RECHECK_S = 30.0
# How long a process trusts what it read of a tenant's paused state.
STATE_TTL_S = 5.0
# How long a process trusts having found every slot of a tenant held: new starts then wait
# without looking (a slot that frees up is handed on by the flow that frees it).
FULL_TTL_S = 1.0

Settle = Callable[[FlowRecord], None]


class AdmissionStore(FlowDocuments, TenantSlots, TenantStates, Protocol):
    """The store's families admission uses: the tenants' slots and states, and the flow
    documents it admits (a waiting flow's change)."""


class Admission:
    """Slots, waiting flows and paused tenants, over a store."""

    def __init__(self, store: AdmissionStore, tenants: Tenants) -> None:
        self._store = store
        self._tenants = tenants
        self._states: dict[str, tuple[float, TenantState]] = {}
        self._full_until: dict[str, float] = {}

    @property
    def tenants(self) -> Tenants:
        return self._tenants

    def must_wait(self, tenant: str) -> bool:
        """Whether a new flow of ``tenant`` starts waiting (its tenant is limited: it takes a
        slot first, in order with the others waiting)."""
        return self._tenants.policy(tenant).limited

    def admit(
        self, plan_for: Callable[[FlowRecord], Plan], tenant: str, now: datetime, settle: Settle
    ) -> int:
        """Admit ``tenant``'s waiting flows, oldest first, while slots are free; how many."""
        policy = self._tenants.policy(tenant)
        if self.paused(tenant):
            return 0
        admitted = 0
        for _ in range(max(1, policy.max_running)):
            waiting = self._store.waiting(tenant, limit=1)
            if not waiting:
                break
            flow = waiting[0]
            grant = self._store.acquire_slot(
                tenant,
                slots=policy.max_running,
                holder=flow.key,
                now=now,
                cooldown_s=policy.slot_cooldown_s,
            )
            if grant.slot is None:
                if grant.free_at is not None:  # a slot only rests: the oldest tries again then
                    self._retry_at(plan_for(flow), flow, grant.free_at, settle)
                else:
                    self._full_until[tenant] = time.monotonic() + FULL_TTL_S
                break
            admit = functools.partial(planner.admitted, plan_for(flow), slot=grant.slot)
            done = self._store.change(flow.key, admit)
            if done is None:  # no longer waiting (cancelled): the slot goes back
                self._store.release_slot(grant.slot, holder=flow.key)
                continue
            admitted += 1
            settle(done)
        return admitted

    def _retry_at(self, plan: Plan, flow: FlowRecord, at: datetime, settle: Settle) -> None:
        written = self._store.change(flow.key, lambda r: planner.await_admission(plan, r, at=at))
        if written is not None:
            settle(written)

    def seems_full(self, tenant: str) -> bool:
        """Whether this process found every slot of ``tenant`` held a moment ago: a new start
        then waits without looking, as it would have found none."""
        return time.monotonic() < self._full_until.get(tenant, 0.0)

    def pass_on(
        self,
        plan_for: Callable[[FlowRecord], Plan],
        record: FlowRecord,
        now: datetime,
        settle: Settle,
    ) -> None:
        """A flow holding a slot ended: hand the slot straight to its tenant's oldest waiting
        flow (a write on the slot and one on that flow, no slot read by query), or give it back
        and admit what there is room for. Safe to repeat: only the holder can pass it on."""
        if record.slot is None:
            return
        slot, holder, tenant = record.slot, record.key, record.tenant
        policy = self._tenants.policy(tenant)
        usable = policy.limited and _slot_number(slot) < policy.max_running
        while usable and not self.paused(tenant):
            waiting = self._store.waiting(tenant, limit=1)
            if not waiting:
                break
            nxt = waiting[0]
            handed = self._store.hand_over_slot(
                slot, holder=holder, to=nxt.key, now=now, cooldown_s=policy.slot_cooldown_s
            )
            if not handed:
                break  # passed on already, or the slot still rests
            admit = functools.partial(planner.admitted, plan_for(nxt), slot=slot)
            done = self._store.change(nxt.key, admit)
            if done is not None:
                settle(done)
                return
            holder = nxt.key  # no longer waiting (cancelled): it holds the slot; go on
        if self._store.release_slot(slot, holder=holder):
            self.admit(plan_for, tenant, now, settle)

    def paused(self, tenant: str, *, fresh: bool = False) -> bool:
        """Whether ``tenant`` is paused (configured so, or by an operator), read at most every
        few seconds per process; read now if ``fresh``."""
        if self._tenants.policy(tenant).paused:
            return True
        now = time.monotonic()
        cached = self._states.get(tenant)
        if fresh or cached is None or now - cached[0] > STATE_TTL_S:
            cached = (now, self._store.tenant_state(tenant))
            self._states[tenant] = cached
        return cached[1].paused

    def forget_full(self, tenant: str) -> None:
        self._full_until.pop(tenant, None)

    def set_paused(
        self, tenant: str, paused: bool, *, by: str, reason: str, at: datetime
    ) -> TenantState:
        state = TenantState(tenant, paused, by, reason, at)
        self._store.set_tenant_state(state)
        self._states[tenant] = (time.monotonic(), state)
        return state


def _slot_number(slot: str) -> int:
    """``acme.7`` -> 7 (a slot's number within its tenant)."""
    number = slot.rpartition(".")[2]
    return int(number) if number.isdigit() else 1 << 30

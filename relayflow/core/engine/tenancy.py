"""Tenancy: pausing and resuming a tenant, and what each tenant's policy and state are now.

Admission itself (slots, waiting flows, hand-overs) is ``relayflow.core.admission``; the
engine admits through ``Kernel.admit`` whenever a flow starts, waits or ends.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from itertools import islice
from typing import Any

from relayflow.core.engine.kernel import Kernel
from relayflow.core.engine.protection import run_now
from relayflow.core.foreach import read_lanes
from relayflow.core.listing import FlowFilter
from relayflow.core.ports import TenantState
from relayflow.core.putoffs import BRING_FORWARD_LIMIT, DUE_SOON_S
from relayflow.core.records import FlowRecord, NextTask
from relayflow.core.state import ACTIVE
from relayflow.core.tenants import DEFAULT_TENANT, TenantPolicy

log = logging.getLogger("relayflow.core.engine")

# Tenants whose counts the views read at once (each reads its statuses side by side too).
TENANTS_AT_ONCE = 8


@dataclass(frozen=True)
class Resumed:
    """A tenant resumed: its state, and how many put-off tasks of its flows ran at once."""

    state: TenantState
    brought_forward: int = 0


class Tenancy:
    """Operators' view of tenants, and their pause switch."""

    def __init__(self, kernel: Kernel) -> None:
        self._k = kernel

    def pause(self, tenant: str, *, by: str, reason: str) -> TenantState:
        """Stop dispatching ``tenant``'s flows (their tasks are put off) and admitting new ones."""
        return self._k.admission.set_paused(
            tenant, True, by=by, reason=reason, at=self._k.clock.now()
        )

    def resume(self, tenant: str, *, by: str, reason: str) -> Resumed:
        """Let ``tenant``'s flows go on where they were, at once (the tasks the pause put off
        are brought forward), and admit its waiting ones."""
        state = self._k.admission.set_paused(
            tenant, False, by=by, reason=reason, at=self._k.clock.now()
        )
        self._k.admit(tenant)
        brought = run_now(self._k.queue, self._put_off(tenant))
        log.info("tenant resumed", extra={"tenant": tenant, "brought_forward": brought})
        return Resumed(state, brought_forward=brought)

    def _put_off(self, tenant: str) -> list[NextTask]:
        """The tasks of ``tenant``'s active flows and of their ForEach lanes that were put off
        and are not due soon, at most ``BRING_FORWARD_LIMIT`` (the rest come back at their own
        time; no flow is read past the limit)."""
        soon = self._k.clock.now() + timedelta(seconds=DUE_SOON_S)
        tasks = (
            task
            for record in self._active(tenant)
            if not self._held(record)
            for each in (record, *self._lanes(record))
            for task in _nexts(each)
            if task.position.deferral and task.run_at > soon
        )
        return list(islice(tasks, BRING_FORWARD_LIMIT))

    def _active(self, tenant: str) -> Iterator[FlowRecord]:
        """``tenant``'s active flows, a query per status, each read only when asked for."""
        for status in ACTIVE:
            wanted = FlowFilter(tenant=tenant, status=status)
            yield from self._k.store.matching(wanted, limit=BRING_FORWARD_LIMIT)

    def _lanes(self, record: FlowRecord) -> list[FlowRecord]:
        """The active lanes of the flow's ForEach that runs its items now (a read each: at
        most its concurrency); none of one whose lanes have all ended."""
        running = [
            scope
            for scope, track in record.tracks.items()
            if track.fanout is not None and len(track.fanout.ended) < track.fanout.lanes
        ]
        found = [lane for scope in running for lane in read_lanes(self._k.store, record, scope)]
        return [lane for lane in found if lane.status in ACTIVE]

    def _held(self, record: FlowRecord) -> bool:
        """Whether a breaker that is not ready holds the flow up: its task was put off for
        that too, and comes forward when the breaker closes."""
        breakers, dependency = self._k.breakers, record.dependency
        return (
            breakers is not None and dependency is not None and not breakers.ready(dependency).run
        )

    def views(self) -> list[dict[str, Any]]:
        """Every tenant with a policy or a state: its limits, paused or not (by whom, why and
        since when), flows running and waiting."""
        states = {s.tenant: s for s in self._k.store.tenant_states()}
        known = sorted(set(self._k.admission.tenants.tenants) | set(states) | {DEFAULT_TENANT})

        def view(name: str) -> dict[str, Any]:
            return self._view(name, states.get(name, TenantState(name)))

        # Each tenant's counts are a round of count aggregations: side by side, a page of ten
        # tenants takes about one round, not ten.
        with ThreadPoolExecutor(max_workers=min(len(known), TENANTS_AT_ONCE)) as pool:
            return list(pool.map(view, known))

    def view(self, tenant: str) -> dict[str, Any] | None:
        """One tenant's view, as ``views`` shows it; None for a tenant with neither a policy
        nor a state (not the default one)."""
        states = {s.tenant: s for s in self._k.store.tenant_states()}
        known = tenant in self._k.admission.tenants.tenants or tenant == DEFAULT_TENANT
        if not known and tenant not in states:
            return None
        return self._view(tenant, states.get(tenant, TenantState(tenant)))

    def _view(self, name: str, state: TenantState) -> dict[str, Any]:
        store = self._k.store
        counts = store.count_by_status(FlowFilter(tenant=name))
        waiting = store.count_waiting(name)
        running = sum(counts[s] for s in ACTIVE) - waiting
        return _view(
            self._k.admission.tenants.policy(name), state, running=running, waiting=waiting
        )


def _nexts(record: FlowRecord) -> list[NextTask]:
    """The tasks a flow waits on: one per track (its parallel steps')."""
    return [t.next for t in record.tracks.values() if t.next is not None]


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

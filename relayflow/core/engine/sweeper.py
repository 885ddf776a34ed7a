"""The sweeper: what a crash or an outage left behind, settled (DESIGN invariant 5).

Active flows whose next task is overdue and gone (for a poll chain: every task the chain may
have made since its last write) get a fresh one, which for a chain starts a new one; ended
flows whose result event never went out publish it; waiting flows a lost hand-over left
waiting are admitted. What cannot be settled is ended (a type no longer deployed, a task lost
too often, a document that no longer parses) or set aside for a while, so the sweep always
reaches the flows behind it (invariant 11).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta

from relayflow.core import planner
from relayflow.core.engine.chains import queued
from relayflow.core.engine.kernel import Kernel
from relayflow.core.engine.outcomes import SweepReport
from relayflow.core.errors import UnknownFlow
from relayflow.core.flows import Flow
from relayflow.core.ports import Unreadable
from relayflow.core.records import FlowRecord
from relayflow.core.state import ACTIVE

log = logging.getLogger("relayflow.core.engine")
SweepAction = Callable[[FlowRecord, SweepReport], None]


class Sweeper:
    """One sweep over what is overdue, unpublished or waiting."""

    def __init__(self, kernel: Kernel) -> None:
        self._k = kernel

    def sweep(self, *, grace_s: float, limit: int = 100) -> SweepReport:
        """Settle what is at least ``grace_s`` overdue, at most ``limit`` flows of each kind."""
        k = self._k
        cutoff = k.clock.now() - timedelta(seconds=grace_s)
        report = SweepReport()
        overdue = k.store.overdue(cutoff=cutoff, limit=limit)
        k.metrics.sweep_found(overdue, now=k.clock.now())
        for found in overdue:
            report.overdue += 1
            if isinstance(found, Unreadable):
                self._fail_unreadable(found, report)
            else:
                self._guarded(found, report, self._recover)
        for record in k.store.unpublished(cutoff=cutoff, limit=limit):
            report.unpublished += 1
            self._guarded(record, report, self._republish)
        # Waiting flows a lost hand-over left waiting: admit what there is room for.
        waiting_tenants = {r.tenant for r in k.store.waiting(limit=limit)}
        for tenant in sorted(waiting_tenants):
            report.admitted += k.admit(tenant)
        limited = {t for t, p in k.admission.tenants.tenants.items() if p.limited}
        k.metrics.tenants_waiting(
            {t: k.store.count_waiting(t) for t in sorted(waiting_tenants | limited)}
        )
        log.info("sweep", extra={"report": report.__dict__})
        return report

    def _guarded(self, record: FlowRecord, report: SweepReport, act: SweepAction) -> None:
        try:
            act(record, report)
        except Exception:  # one bad flow must not starve the others
            report.errors += 1
            log.exception("sweep could not settle a flow", extra={"flow_id": record.flow_id})
            self._set_aside(record)

    def _set_aside(self, record: FlowRecord) -> None:
        """Move a flow the sweep cannot settle out of the head of the overdue query for a
        while (best effort)."""
        until = self._k.clock.now() + timedelta(seconds=self._k.limits.sweep_backoff_s)
        seen = record.tracks
        try:
            self._k.store.change(
                record.key,
                lambda current: (
                    planner.set_aside(current, until) if current.tracks == seen else None
                ),
            )
        except Exception:
            log.warning("could not set a flow aside", extra={"flow_id": record.flow_id})

    def _recover(self, record: FlowRecord, report: SweepReport) -> None:
        if not record.tracks:
            return
        try:
            flow = self._k.planning_flow(record)
        except UnknownFlow:
            self._recover_unknown_type(record, report)
            return
        queue, key, chain = self._k.queue, record.key, self._k.limits.poll_chain
        lost = [
            k for k, t in record.tracks.items() if t.next and not queued(queue, key, t.next, chain)
        ]
        if not lost:
            report.still_queued += 1  # late (a backlog or a paused queue), not lost
            self._set_aside(record)
            return
        for key in lost:
            report.rescued += self._rescue(record, flow, key)

    def _recover_unknown_type(self, record: FlowRecord, report: SweepReport) -> None:
        due = record.next_run_at or record.updated_at
        if (self._k.clock.now() - due).total_seconds() < self._k.limits.unknown_flow_grace_s:
            self._set_aside(record)  # a rolling deploy may bring the type back
            return
        plan = self._k.plan(None)
        seen = record.tracks
        message = f"no deployed version runs {record.flow!r} flows"
        committed = self._k.store.change(
            record.key,
            lambda current: (
                planner.unknown_flow(plan, current, message=message)
                if (current.status in ACTIVE or current.cleaning) and current.tracks == seen
                else None
            ),
        )
        if committed is not None:
            report.ended += 1
            self._k.settle(committed)

    def _fail_unreadable(self, found: Unreadable, report: SweepReport) -> None:
        try:
            self._k.store.fail_unreadable(
                found.flow_id, reason=found.reason, now=self._k.clock.now()
            )
            report.ended += 1
        except Exception:
            report.errors += 1
            log.exception("could not end an unreadable flow", extra={"flow_id": found.flow_id})

    def _republish(self, record: FlowRecord, report: SweepReport) -> None:
        self._k.settle(record)
        report.republished += 1

    def _rescue(self, record: FlowRecord, flow: Flow, key: str) -> int:
        stuck = record.tracks[key].next
        plan = self._k.plan(flow)
        limit = self._k.limits.max_rescues

        def rescued(latest: FlowRecord) -> FlowRecord | None:
            track = latest.tracks.get(key)
            moving = latest.status in ACTIVE or latest.cleaning
            if not moving or track is None or track.next != stuck:
                return None
            current = latest.focused(key)
            if current.position.rescue >= limit:
                return planner.lost(plan, current, rescues=limit)
            return planner.rescue(plan, current)

        committed = self._k.store.change(record.key, rescued)
        if committed is None:
            return 0
        self._k.settle(committed)
        log.warning("rescued a lost task", extra={"flow_id": record.flow_id})
        self._k.metrics.sweeper_rescued(record.flow)
        return 1

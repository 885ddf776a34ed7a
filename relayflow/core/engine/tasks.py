"""Tasks: a Cloud Task's delivery, from the flow's read to the part of the engine that runs it.

A task runs only if it is for the flow's current position (invariant 4); otherwise it is a
duplicate or a late one and only settles the flow (a poll chain's, cut mid-way, also records
the polls it carried, which no checkpoint did). Then, in order: a waiting flow's try for a
slot goes to admission; a flow whose type is not deployed waits out a grace period; a paused
tenant's task is put off; a lane's task runs with the item steps; a definition that no longer
fits ends the flow; a ForEach's own task goes to the lanes; any other step is delivered.
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import timedelta

from relayflow.core import admission, planner, tracing
from relayflow.core.engine.children import Children
from relayflow.core.engine.delivery import Delivery
from relayflow.core.engine.endings import Endings
from relayflow.core.engine.focus import ended_by, mismatch, track_of
from relayflow.core.engine.inline import REQUEST, Request
from relayflow.core.engine.kernel import Kernel
from relayflow.core.engine.lanes import Lanes
from relayflow.core.engine.outcomes import Ran
from relayflow.core.engine.protection import Protection
from relayflow.core.errors import UnknownFlow
from relayflow.core.flows import Flow
from relayflow.core.planner.chain import entries_of, recorded_late, replayed
from relayflow.core.ports import Snapshot
from relayflow.core.position import Position, TaskPayload

log = logging.getLogger("relayflow.core.engine")


class Tasks:
    """Routes each task delivery to what runs it."""

    def __init__(
        self,
        kernel: Kernel,
        delivery: Delivery,
        lanes: Lanes,
        protection: Protection,
        endings: Endings,
        children: Children,
    ) -> None:
        self._k = kernel
        self._delivery = delivery
        self._lanes = lanes
        self._protection = protection
        self._endings = endings
        self._children = children

    def run(self, payload: TaskPayload, *, redelivery: bool = False, answered: bool = False) -> Ran:
        """Run the task at ``payload.position`` if it is the flow's current position.

        ``redelivery``: Cloud Tasks says this delivery retries one that failed (its
        X-CloudTasks-TaskRetryCount is above 0), not a first delivery or a duplicate of one;
        ``answered``: the attempt it retries got an answer, so it no longer runs.
        """
        found = self._k.read(payload.flow_id)
        if found is None:
            log.warning("task for unknown flow", extra={"flow_id": payload.flow_id})
            return Ran.NO_FLOW
        budget_s = self._k.budget_s(payload.position.kind)
        request = Request(self._k.clock.now(), budget_s, redelivery=redelivery, answered=answered)
        token = REQUEST.set(request)
        try:
            with tracing.log_fields(flow_id=payload.flow_id, tenant=found.record.tenant):
                return self._run_found(found, payload, redelivery)
        finally:
            REQUEST.reset(token)

    def _run_found(self, found: Snapshot, payload: TaskPayload, redelivery: bool) -> Ran:
        position = payload.position
        child = self._children.run(found, payload)  # a ChildFlow step's: found by its try
        if child is not None:
            return child
        key = track_of(found.record, position)
        if key is None:
            if redelivery and ended_by(found.record, position):
                # The delivery that ended the flow failed after its commit, which marked the
                # result event sent: it may not have gone out. Again, then (subscribers
                # dedupe on flow_id and generation).
                self._k.results.publish(found.record, None, marked=True)
            self._k.settle(found.record)
            if payload.chain:
                self._record_cut_chain(found, payload)
            return Ran.STALE
        found = _at(found, key, payload)
        if position.admitting:
            return self._run_admit(found)
        try:
            flow, gone = self._k.definition(found.record)
        except UnknownFlow:
            return self._endings.unknown_type(found, position)
        if self._paused(found.record.tenant, position):
            later = self._k.clock.now() + timedelta(seconds=admission.PAUSE_RECHECK_S)
            return self._protection.put_off(found, "its tenant is paused", later)
        if found.record.is_lane:
            return self._lanes.run_lane_task(found, flow, gone)
        return self._run_flow_task(found, flow, gone)

    def _paused(self, tenant: str, position: Position) -> bool:
        """Whether ``tenant`` is paused. A task the pause put off that comes back while this
        process still believes it paused reads its state again: a resume brings those tasks
        forward at once, and they must not be put off for another round on a stale word."""
        paused = self._k.admission.paused(tenant)
        if paused and position.deferral:
            return self._k.admission.paused(tenant, fresh=True)
        return paused

    def _run_flow_task(self, found: Snapshot, flow: Flow, gone: str) -> Ran:
        position = found.record.position
        # A flow whose version is gone is undone with the newest one: its undo's tasks (a
        # ForEach's gather of its items' effects comes first) run; any other ends it.
        if gone and not (position.undoing or position.gathers):
            log.error("flow version no longer registered", extra={"flow_id": found.record.key})
            return self._endings.definition_changed(found, position, self._k.plan(flow), gone)
        why = mismatch(self._k.kinds, flow, position)
        if why:
            log.error("flow definition changed", extra={"flow_id": found.record.key})
            return self._endings.definition_changed(found, position, self._k.plan(flow), why)
        if self._k.kinds.at(flow, position).runs_itself(position.kind):
            return self._lanes.run_own_task(found, flow)
        return self._delivery.run_step(found, flow)

    def _run_admit(self, found: Snapshot) -> Ran:
        """A waiting flow's retry for a slot: the retry is over; admit what there is room for."""
        record = found.record
        self._k.store.change(record.key, planner.admission_tried)
        self._k.admit(record.tenant)
        return Ran.ADVANCED

    def _record_cut_chain(self, found: Snapshot, payload: TaskPayload) -> None:
        """A stale poll chain's task: its flow moved on mid-chain (a rescue, a cancel, a
        retry, its callback), so no checkpoint recorded the polls it carries. They go into
        the history, once: one write, none if the history has them already."""
        plan, carried = self._k.plan(None), entries_of(payload)
        if recorded_late(plan, found.record, carried) is None:  # read, not written: a duplicate
            return
        self._k.store.change(
            found.record.key, lambda latest: recorded_late(plan, latest, carried), start=found
        )


def _at(found: Snapshot, key: str, payload: TaskPayload) -> Snapshot:
    """``found`` focused on track ``key`` at the task's position: a later poll of a chain sees
    the flow as if every poll its task carried had been written (and a write records them)."""
    focused = found.record.focused(key)
    carried = entries_of(payload) if focused.position != payload.position else ()
    record = replayed(focused, payload.position, carried)
    return dataclasses.replace(found, record=record, carried=carried)

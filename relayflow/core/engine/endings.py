"""Endings for flows whose definition no longer runs them: a version gone or changed beneath a
running flow, or a flow type no deployed version knows."""

from __future__ import annotations

import logging

from relayflow.core import planner
from relayflow.core.engine.focus import focused_at
from relayflow.core.engine.kernel import Kernel
from relayflow.core.engine.outcomes import Ran
from relayflow.core.errors import UnknownFlow
from relayflow.core.planner import Plan
from relayflow.core.ports import Snapshot
from relayflow.core.position import Position
from relayflow.core.records import FlowRecord

log = logging.getLogger("relayflow.core.engine")


class Endings:
    """Ends flows that no definition fits any more."""

    def __init__(self, kernel: Kernel) -> None:
        self._k = kernel

    def definition_changed(self, found: Snapshot, position: Position, plan: Plan, why: str) -> Ran:
        """End a flow whose definition no longer fits it: DEFINITION_CHANGED, undone with the
        newest version's compensations if its own version is gone."""

        def ended(latest: FlowRecord) -> FlowRecord | None:
            current = focused_at(latest, position, found.carried)
            if current is None:
                return None
            if current.version != plan.flow.version:
                return planner.definition_gone(plan, current, message=why)
            return planner.abort(plan, current, code="DEFINITION_CHANGED", message=why)

        return self._k.write(found, ended)

    def unknown_type(self, found: Snapshot, position: Position) -> Ran:
        """A flow whose type no deployed version knows: 5xx for a grace period (a rolling
        deploy may still reach an instance that knows it), then FAILED (UNKNOWN_FLOW)."""
        record = found.record
        due = record.next_run_at or record.updated_at
        waited_s = (self._k.clock.now() - due).total_seconds()
        grace_s = self._k.limits.unknown_flow_grace_s
        if waited_s < grace_s:
            raise UnknownFlow(
                f"flow {record.flow_id} is a {record.flow!r} flow, which this deployment does "
                f"not run; retried for {grace_s:.0f}s after it was due"
            )
        log.error("flow type not deployed", extra={"flow_id": record.flow_id})
        plan = self._k.plan(None)
        message = f"no deployed version runs {record.flow!r} flows"

        def ended(latest: FlowRecord) -> FlowRecord | None:
            current = focused_at(latest, position, found.carried)
            if current is None:
                return None
            return planner.unknown_flow(plan, current, message=message)

        return self._k.write(found, ended)

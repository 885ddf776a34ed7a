"""ForEach lanes: the engine's own tasks of a ForEach step, and the tasks of its lanes.

A ForEach lists its items and starts its lanes (FANOUT), joins their outputs once all have
ended (JOIN), and before it is undone stops the lanes and gathers their items' effects
(GATHER). A lane is a small flow document of its own that runs the item steps one item after
another; its tasks run like a flow's, with the item steps as their definition. What a lane does
is reported to its flow when it is settled (``Kernel.settle``).
"""

from __future__ import annotations

from typing import Any, cast

from relayflow.core import foreach
from relayflow.core.engine.delivery import Delivery
from relayflow.core.engine.endings import Endings
from relayflow.core.engine.execution import Execution
from relayflow.core.engine.focus import focused_at, mismatch
from relayflow.core.engine.kernel import Kernel
from relayflow.core.engine.outcomes import Ran
from relayflow.core.errors import PayloadUnavailable, PermanentError, Unreadable
from relayflow.core.flows import Flow, ForEach
from relayflow.core.kinds.foreach import cancel_lane, fanned_out, gathered, lanes_started
from relayflow.core.planner import Failed, Outcome, Plan, Retry
from relayflow.core.ports import Snapshot
from relayflow.core.position import Position
from relayflow.core.records import Effect, FlowRecord


class Lanes:
    """Runs a ForEach's own tasks and its lanes' tasks."""

    def __init__(
        self, kernel: Kernel, delivery: Delivery, execution: Execution, endings: Endings
    ) -> None:
        self._k = kernel
        self._delivery = delivery
        self._execution = execution
        self._endings = endings

    def run_lane_task(self, found: Snapshot, flow: Flow, gone: str) -> Ran:
        """A task of a ForEach lane: run like a flow's, with the item steps as definition. A
        lane whose flow's definition no longer fits is stopped, and its flow ended
        (DEFINITION_CHANGED): the flow has no task of its own while its lanes run, so nothing
        else would end it."""
        record = found.record
        assert record.scope is not None
        items = foreach.item_flow(flow, record.scope)
        why = gone or mismatch(self._k.kinds, flow, record.position)
        if why:
            plan = self._k.plan(items)
            stopped = self._k.store.change(record.key, lambda lane: cancel_lane(plan, lane))
            self._end_flow_of(record, flow, why)
            return Ran.ADVANCED if stopped else Ran.STALE
        return self._delivery.run_step(found, items)

    def _end_flow_of(self, lane: FlowRecord, flow: Flow, why: str) -> None:
        """End the flow of ``lane`` at its ForEach, as a task of its own would have."""
        assert lane.parent is not None and lane.scope is not None
        found = self._k.read(lane.parent)
        if found is None or found.record.tracks.get(lane.scope) is None:
            return  # gone, or past its ForEach already
        focused = found.record.focused(lane.scope)
        at = Snapshot(focused, found.version)
        self._endings.definition_changed(at, focused.position, self._k.plan(flow), why)

    def run_own_task(self, found: Snapshot, flow: Flow) -> Ran:
        """A ForEach's own task at the focused position: fan out, join, or gather."""
        position = found.record.position
        if position.joins:
            return self._join(found, flow)
        if position.gathers:
            plan = self._k.plan(flow)
            effects = foreach.gather(self._k.store, plan, found.record)
            return self._k.write(found, lambda latest: _applied(latest, position, plan, effects))
        return self._fan_out(found, flow)

    def _join(self, found: Snapshot, flow: Flow) -> Ran:
        """Join the lanes' outputs into the ForEach's (offloaded if large: the items' outputs
        are read back from their pages and joined, a value of up to ``Sizes.output_bytes``;
        their sensitive fields were sealed where they are in the join: they stay sealed)."""
        position = found.record.position
        keeps = self._k.kinds.keep_outputs(self._k.kinds.inner(flow, position.step))
        outcome: Outcome
        left: list[Effect] = []
        try:
            output, left = foreach.join(self._k.store, found, keeps=keeps, load=self._k.resolved)
            where = f"output of {position.step}"
            outcome = self._k.stored(output, found.record, step=position.step, where=where)
        except PayloadUnavailable as exc:
            outcome = Retry(exc)
        except Unreadable as exc:  # an item's output is gone or does not match
            outcome = Failed(exc)
        except foreach.LaneFailed as exc:  # a lane aborted: its items' outputs are not there
            outcome = Failed(exc)
        return self._delivery.commit(found, position, flow, outcome, adopt=left)

    def _fan_out(self, found: Snapshot, flow: Flow) -> Ran:
        """List the ForEach's items, record the fan-out, start its lanes, then end its task."""
        record = found.record
        scope = record.position.step
        if record.tracks[scope].fanout is None:
            try:
                items = foreach.list_items(
                    _each(flow, scope), self._execution.context(flow, record)
                )
            except Unreadable as exc:  # a payload its items are read from is gone
                return self._delivery.commit(found, record.position, flow, Failed(exc))
            except (foreach.BadItems, Exception) as exc:
                failed = Failed(PermanentError(f"{type(exc).__name__}: {exc}", code="BAD_ITEMS"))
                return self._delivery.commit(found, record.position, flow, failed)
            plan = self._k.plan(flow)
            written = self._k.store.change_versioned(
                record.key,
                lambda latest: _fanned(latest, record.position, plan, items),
            )
            if written is None:
                return Ran.STALE
            found = written
            if found.record.tracks.get(scope) is None:  # no items: the ForEach is done
                self._k.settle(found.record, version=found)
                return Ran.ADVANCED
        return self._start_lanes(found, flow, scope)

    def _start_lanes(self, found: Snapshot, flow: Flow, scope: str) -> Ran:
        record = found.record.focused(scope)
        each = _each(flow, scope)
        items = foreach.list_items(each, self._execution.context(flow, record))
        item_plan = self._k.plan(self._k.kinds.inner(flow, scope))
        for lane in foreach.start_lanes(self._k.store, item_plan, record, scope, items):
            self._k.settle(lane)
        position = record.position
        return self._k.write(
            Snapshot(record, found.version),
            lambda latest: _started(latest, position),
        )


def _each(flow: Flow, scope: str) -> ForEach:
    """The ForEach step ``scope`` (a position of a ForEach's own task names one)."""
    return cast(ForEach, flow.named(scope))


def _fanned(
    latest: FlowRecord, position: Position, plan: Plan, items: list[Any]
) -> FlowRecord | None:
    current = focused_at(latest, position)
    if current is None or current.tracks[position.step].fanout is not None:
        return None
    return fanned_out(plan, current, items)


def _started(latest: FlowRecord, position: Position) -> FlowRecord | None:
    current = focused_at(latest, position)
    if current is None or current.next is None:
        return None
    return lanes_started(current)


def _applied(
    latest: FlowRecord, position: Position, plan: Plan, effects: list[Effect]
) -> FlowRecord | None:
    current = focused_at(latest, position)
    return None if current is None else gathered(plan, current, effects)

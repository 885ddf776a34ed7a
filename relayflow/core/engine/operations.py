"""Operations: what an operator (the api, the console, the CLI) reads and does to one flow —
get and find it, list its lanes, cancel it, run it again (from a chosen step, said first by a
dry run), undo what it left live."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from relayflow.core import planner
from relayflow.core.engine.kernel import Kernel
from relayflow.core.errors import AmbiguousFlow, FlowNotFound, InvalidTransition, UnknownFlow
from relayflow.core.flows import Flow
from relayflow.core.planner import BulkMark, Plan, Preview
from relayflow.core.position import split_effect_name
from relayflow.core.records import FlowRecord, flow_key, split_key
from relayflow.core.state import TERMINAL

Operation = Callable[[Plan, FlowRecord], FlowRecord]  # an operator's change, planned


class Operations:
    """Reads flows for operators and applies their changes."""

    def __init__(self, kernel: Kernel) -> None:
        self._k = kernel

    def get(self, flow_id: str) -> FlowRecord:
        """The flow by its key (``FlowRecord.key``: for the default tenant's flows, the id),
        or FlowNotFound."""
        record = self._k.store.get(flow_id)
        if record is None:
            raise FlowNotFound(f"no flow with id {split_key(flow_id)[1]!r}")
        return record

    def find(
        self, flow_id: str, *, tenant: str | None, visible: Callable[[str], bool] | None
    ) -> FlowRecord:
        """The flow with id ``flow_id``: ``tenant``'s, or whichever tenant's it is, among those
        ``visible`` admits. FlowNotFound if there is none (or only one the caller may not see,
        which looks the same); AmbiguousFlow if several tenants use the id and ``tenant`` does
        not say which."""
        if tenant is not None:
            found = self._k.store.get(flow_key(tenant, flow_id))
            candidates = [found] if found is not None else []
        else:
            candidates = self._k.store.find(flow_id)
        shown = [r for r in candidates if visible is None or visible(r.tenant)]
        if not shown:
            raise FlowNotFound(f"no flow with id {flow_id!r}")
        if len(shown) > 1:
            tenants = ", ".join(sorted(r.tenant for r in shown))
            raise AmbiguousFlow(f"flow id {flow_id!r} names flows of tenants {tenants}: say which")
        return shown[0]

    def lanes(self, flow_id: str) -> list[FlowRecord]:
        """The ForEach lanes of a flow's current run (FlowNotFound if there is no flow)."""
        record = self.get(flow_id)
        found = [self._k.store.get(lane_id) for lane_id in record.lanes]
        return [lane for lane in found if lane is not None]

    def cancel(
        self, flow_id: str, reason: str, *, by: str, bulk: BulkMark | None = None
    ) -> FlowRecord:
        """Cancel an active flow (see ``Engine.cancel``)."""
        tag = bulk.bulk if bulk is not None else ""
        return self._operate(
            flow_id,
            lambda plan, r: planner.cancel(plan, planner.checked(r, bulk), reason, by=by, bulk=tag),
        )

    def retry(
        self,
        flow_id: str,
        *,
        reason: str,
        by: str,
        bulk: BulkMark | None = None,
        start_in_s: float = 0.0,
    ) -> FlowRecord:
        """Run an ended flow again as a new generation, its ended generation's result event
        sent first if it has not been, so a retry never swallows it."""
        self._settled(flow_id)
        tag = bulk.bulk if bulk is not None else ""
        return self._operate(
            flow_id,
            lambda plan, r: planner.restart(
                plan, planner.checked(r, bulk), reason=reason, by=by, bulk=tag, delay_s=start_in_s
            ),
        )

    def reset(
        self,
        flow_id: str,
        step: str,
        *,
        undo: bool,
        reason: str,
        by: str,
        bulk: BulkMark | None = None,
    ) -> FlowRecord:
        """Run an ended flow again from ``step`` as a new generation (see ``Engine.reset``),
        its ended generation's result event sent first if it has not been."""
        self._settled(flow_id)
        tag = bulk.bulk if bulk is not None else ""
        return self._operate(
            flow_id,
            lambda plan, r: planner.reset(
                plan, planner.checked(r, bulk), step, undo=undo, reason=reason, by=by, bulk=tag
            ),
        )

    def preview_reset(self, flow_id: str, step: str, *, undo: bool) -> planner.Preview:
        """What ``reset`` would do now, changing nothing (see ``Engine.preview_reset``)."""
        record = self.get(flow_id)
        return planner.preview_reset(self._plan_for(record), record, step, undo=undo)

    def preview(
        self, record: FlowRecord, action: str, *, step: str | None = None, undo: bool = True
    ) -> Preview:
        """What ``action`` (retry, cancel, or reset to ``step``, undoing what ran from it or
        not) would do to ``record`` now: a dry run's row, from the same planner functions the
        operation runs, with what its steps call (``dependencies``)."""
        plan = self._plan_for(record)
        if action == "reset":
            if step is None:
                raise ValueError("a reset's preview needs the step to reset to")
            preview = planner.preview_reset(plan, record, step, undo=undo)
        elif action in ("retry", "cancel"):
            previewed = planner.preview_retry if action == "retry" else planner.preview_cancel
            preview = previewed(plan, record)
        else:
            raise ValueError(f"no preview of {action!r}: retry, cancel or reset")
        if plan.definition is None or not preview.allowed:
            return preview
        called = self._dependencies(plan.definition, (*preview.rerun, *preview.undone))
        detail = {**preview.detail, "dependencies": sorted(called)}
        return dataclasses.replace(preview, detail=detail)

    def _dependencies(self, flow: Flow, steps: Iterable[str]) -> set[str]:
        """What ``steps`` of ``flow`` call (a ForEach's item steps too; an item's effect is
        named ``each[7].charge``)."""
        kinds = self._k.kinds
        called: set[str] = set()
        for name in steps:
            scope, _, step_name = split_effect_name(name)
            container = kinds.container(flow, scope)
            index = container.index_of(step_name)
            if index is None:
                continue
            step = container.step(index)
            inner = kinds.of(step).inner(step)
            if inner is not None:
                called |= kinds.dependencies([inner])
            elif (dependency := kinds.of(step).dependency(step)) is not None:
                called.add(dependency)
        return called

    def undo(self, flow_id: str, *, reason: str, by: str) -> FlowRecord:
        """Start a new clean-up of what an ended flow left live (see ``Engine.undo``)."""
        return self._operate(flow_id, lambda plan, r: planner.undo_again(plan, r, reason, by=by))

    def _settled(self, flow_id: str) -> None:
        """An ended flow's result event sent, if it has not been: an operator's new
        generation never swallows it."""
        ended = self.get(flow_id)
        if ended.status in TERMINAL and not ended.result_published:
            self._k.settle(ended)

    def _plan_for(self, record: FlowRecord) -> Plan:
        """A plan with the flow's definition (none if no deployed version runs it)."""
        try:
            definition: Flow | None = self._k.definition(record)[0]
        except UnknownFlow:
            definition = None
        return self._k.plan(definition)

    def _operate(self, flow_id: str, op: Operation) -> FlowRecord:
        plan = self._plan_for(self.get(flow_id))
        errors: list[InvalidTransition] = []

        def change(current: FlowRecord) -> FlowRecord | None:
            try:
                updated: FlowRecord = op(plan, current)
            except InvalidTransition as exc:
                errors.append(exc)
                return None
            except UnknownFlow:
                errors.append(InvalidTransition(f"no deployed version runs {current.flow!r} flows"))
                return None
            return updated

        committed = self._k.store.change(flow_id, change)
        if errors:
            raise errors[-1]
        if committed is None:
            raise FlowNotFound(f"no flow with id {flow_id!r}")
        self._k.settle(committed)
        return committed

"""Operations: what an operator (the api, the console, the CLI) reads and does to one flow —
get and find it, list its lanes, cancel it, run it again, undo what it left live."""

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
        ended = self.get(flow_id)
        if ended.status in TERMINAL and not ended.result_published:
            self._k.settle(ended)
        tag = bulk.bulk if bulk is not None else ""
        return self._operate(
            flow_id,
            lambda plan, r: planner.restart(
                plan, planner.checked(r, bulk), reason=reason, by=by, bulk=tag, delay_s=start_in_s
            ),
        )

    def preview(self, record: FlowRecord, action: str) -> Preview:
        """What ``action`` (retry, cancel) would do to ``record`` now: a dry run's row, from
        the same planner functions the operation runs."""
        previews = {"retry": planner.preview_retry, "cancel": planner.preview_cancel}
        if action not in previews:
            raise ValueError(f"no preview of {action!r}: retry or cancel")
        definition = self._definition(record)
        preview = previews[action](self._k.plan(definition), record)
        if definition is None or not preview.allowed:
            return preview
        called = self._dependencies(definition, (*preview.rerun, *preview.undone))
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

    def _definition(self, record: FlowRecord) -> Flow | None:
        """The definition to plan an operation on ``record`` with (None: its type is gone)."""
        try:
            return self._k.definition(record)[0]
        except UnknownFlow:
            return None

    def undo(self, flow_id: str, *, reason: str, by: str) -> FlowRecord:
        """Start a new clean-up of what an ended flow left live (see ``Engine.undo``)."""
        return self._operate(flow_id, lambda plan, r: planner.undo_again(plan, r, reason, by=by))

    def _operate(self, flow_id: str, op: Operation) -> FlowRecord:
        record = self.get(flow_id)
        plan = self._k.plan(self._definition(record))
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

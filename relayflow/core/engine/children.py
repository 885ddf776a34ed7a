"""Child flows: the engine's own tasks of a ChildFlow step (see ``kinds.child`` for the order
of things and why no end of a child is ever missed).

``CHILD`` notes the child on the parent, then creates it; ``CHILD_WAIT`` (the child's end, or
the parent's deadline) ends the step with the child's result; ``COMPENSATE`` undoes the child
(cancels a running one, undoes a succeeded one's effects) and ``CHILD_UNDO`` (the end of that
undo) lets the parent's saga go on. A task of these finds its track by its try, whatever its
rescue or deferral number, since the child's task names the try it was made for.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from relayflow.core import planner
from relayflow.core.codec import Slot, incarnation
from relayflow.core.engine.execution import Execution
from relayflow.core.engine.focus import fitting, mismatch
from relayflow.core.engine.kernel import Kernel
from relayflow.core.engine.outcomes import Ran
from relayflow.core.errors import (
    ConfigError,
    InvalidTransition,
    PermanentError,
    UnknownFlow,
    Unreadable,
)
from relayflow.core.flows import ChildFlow, Flow, Registry
from relayflow.core.kinds.child import (
    CHILD_TASKS,
    Child,
    await_undo,
    child_id,
    child_of,
    child_outcome,
    deadline_passed,
    undo_for_parent,
    undo_outcome,
    undo_waiting_position,
    waiting_position,
    wake_task,
    with_deadline,
)
from relayflow.core.payloads import INLINE
from relayflow.core.planner import Completed, Failed, Outcome, Plan
from relayflow.core.ports import Snapshot
from relayflow.core.position import Position, TaskKind, TaskPayload
from relayflow.core.records import FlowRecord, NextTask, flow_key, parent_spread, split_key
from relayflow.core.sealing import owner_of
from relayflow.core.state import ACTIVE, TERMINAL, Status
from relayflow.core.values import UnstorableValue, check_storable

log = logging.getLogger("relayflow.core.engine")
# A child's input when values are not offloaded (``core.payloads.Sizes``).
MAX_CHILD_INPUT_BYTES = INLINE.child_input_bytes


class Children:
    """Runs ChildFlow steps' tasks."""

    def __init__(self, kernel: Kernel, execution: Execution) -> None:
        self._k = kernel
        self._execution = execution
        check_children(kernel.registry)

    def run(self, found: Snapshot, payload: TaskPayload) -> Ran | None:
        """Run ``payload`` if it is a child step's task; None: not one of ours (or one the
        usual path handles: a stale task, a paused tenant, a changed definition)."""
        pos = payload.position
        if pos.kind not in CHILD_TASKS and pos.kind is not TaskKind.COMPENSATE:
            return None
        record = found.record
        key = same_try(record, pos)
        try:
            flow = self._k.definition(record)[0]
        except UnknownFlow:
            return None
        if key is None:
            return self._stale(found, pos, flow)
        at = record.tracks[key].position
        if self._k.admission.paused(record.tenant) or mismatch(self._k.kinds, flow, at):
            return None
        step = self._k.kinds.container(flow, at.scope).step(at.step_index)
        if not isinstance(self._k.kinds.of(step), Child):
            return None  # an action's undo
        assert isinstance(step, ChildFlow)
        focused = dataclasses.replace(found, record=record.focused(key))
        if at.kind is TaskKind.CHILD:
            return self._start(focused, step)
        if at.kind is TaskKind.CHILD_WAIT:
            return self._wake(focused)
        if at.kind is TaskKind.COMPENSATE:
            return self._undo(focused, step)
        return self._undone(focused)

    def _start(self, found: Snapshot, step: ChildFlow) -> Ran:
        """Note the child on the parent (it now waits for it), then create the child."""
        record = found.record
        plan = self._k.plan_for(record)
        key = flow_key(record.tenant, child_id(record, record.position))
        made = self._child_input(record, step, key)
        if isinstance(made, Failed):
            return self._commit(found, plan, made)
        ran = self._commit(found, plan, Completed({"child": key}))
        self._ensure_child(record.key, step, made, key)
        return ran

    def _child_input(
        self, record: FlowRecord, step: ChildFlow, key: str
    ) -> dict[str, Any] | Failed:
        """Child ``key``'s input (the parent's, or made from the parent's context) as the
        child stores it, checked; or why it cannot start."""
        try:
            child_flow = self._k.registry.get(step.flow, step.version)
        except UnknownFlow as exc:
            return Failed(PermanentError(str(exc), code="UNKNOWN_CHILD_FLOW"))
        if step.input is None and not self._k.sealing.marking():
            return dict(record.input)  # nothing to seal: the parent's, as it is stored
        try:
            made = self._made_input(record, step)
        except Unreadable as exc:  # a payload it would read is gone or does not match
            return Failed(exc)
        if isinstance(made, Failed):
            return made
        # The parent's sealed values it passes on, sealed again for the child; then sealed
        # where the child marks its input and offloaded if large, named as the child's in
        # its parent's incarnation (the child's own is not known before it is created).
        again = self._k.sealing.resealed(
            made, source=(owner_of(record), ("input",)), target=(key, ("input",))
        )
        slot = Slot(
            key=key,
            incarnation=incarnation(record.created_at),
            flow=child_flow.name,
            version=child_flow.version,
            path=("input",),
        )
        stored: dict[str, Any] = self._k.codec.encode(again, slot)
        return stored

    def _made_input(self, record: FlowRecord, step: ChildFlow) -> dict[str, Any] | Failed:
        """The child's input as its parent gives it: the parent's (sealed values sealed), or
        what ``step.input`` makes of the parent's context, checked."""
        if step.input is None:
            made: dict[str, Any] = self._k.resolved(record.input, record)
            return made
        ctx = self._execution.context(self._k.planning_flow(record), record)
        try:
            made = step.input(ctx)
            if not isinstance(made, dict):
                raise UnstorableValue(f"it returned a {type(made).__name__}, not a dict")
            limit = self._k.sizes.child_input_bytes
            check_storable(made, where="the child's input", max_bytes=limit)
        except Exception as exc:  # the user's function: any error fails the step, named
            message = f"the input of child step {step.name!r} failed: {exc}"[:2000]
            return Failed(PermanentError(message, code="BAD_CHILD_INPUT"))
        return made

    def _ensure_child(
        self, parent_key: str, step: ChildFlow, input: dict[str, Any], key: str
    ) -> None:
        """Create child ``key`` if its parent waits for it and it does not exist yet (a create
        that fails if it does); settle it either way."""
        parent = self._k.store.get(parent_key)
        track = waiting_for(parent, key) if parent is not None else None
        if parent is None or track is None:
            return  # the parent moved on before noting this child: none is started
        waiting = parent.focused(track)
        existing = self._k.store.get(key)
        if existing is not None:
            self._k.settle(existing)
            return
        child_flow = self._k.registry.get(step.flow, step.version)
        plan = self._k.plan(child_flow)
        tenant = parent.tenant
        record = planner.new_record(
            plan,
            flow_id=split_key(key)[1],
            input=input,
            message_id=None,
            deadline_s=step.deadline_s,
            tenant=tenant,
            priority=parent.priority,
            waiting=self._k.admission.must_wait(tenant),
            first_lease_s=self._k.limits.claim_lease_s + self._k.limits.first_delivery_within_s,
        )
        link = child_of(self._k.plan_for(parent), waiting, key, waiting.position)
        spread = parent_spread(flow_key(tenant, link.flow_id))
        record = record.model_copy(
            update={"child_of": link, "parent_spread": spread, "trace": parent.trace}
        )
        if not self._k.store.create(record):
            again = self._k.store.get(key)
            if again is not None:
                self._k.settle(again)
            return
        self._k.metrics.flow_started(child_flow.name, self._k.admission.tenants.label(tenant))
        self._k.settle(record)
        if record.admission == "waiting" and not self._k.admission.seems_full(tenant):
            self._k.admit(tenant)
        log.info("child flow started", extra={"flow_id": record.flow_id, "parent": parent_key})

    def _wake(self, found: Snapshot) -> Ran:
        """The child's end (or the parent's deadline): the step ends with the child's result;
        if the child has not ended, only a deadline changes anything."""
        record = found.record
        plan = self._k.plan_for(record)
        child_key = record.tracks[record.focus or ""].child
        child = self._k.store.get(child_key) if child_key else None
        outcome = child_outcome(child)
        if isinstance(outcome, Completed) and child is not None:
            outcome = self._child_result(outcome, child, record)
        if outcome is not None:
            return self._commit(found, plan, outcome)
        deadline = record.deadline_at
        if deadline is not None and plan.now >= deadline:
            return self._write(found, lambda current: deadline_passed(plan, current))
        due = record.next
        if deadline is not None and due is not None and due.run_at <= plan.now:
            return self._write(found, lambda current: with_deadline(plan, current))  # a hop
        return Ran.STALE  # an early or repeated wake: the child has not ended

    def _child_result(self, outcome: Completed, child: FlowRecord, record: FlowRecord) -> Outcome:
        """The child's result as this step's output: its sealed values sealed again for the
        parent, then sealed where the parent marks the step's output, offloaded if large
        (``Failed``: a payload of it gone or not matching)."""
        if not self._k.sealing.marking():
            return outcome  # nothing to seal: its data as the child stores it
        slot = Slot.of(record, "outputs", record.position.step)
        try:
            data = self._k.resolved(outcome.output, child)
        except Unreadable as exc:
            return Failed(exc)
        target = (slot.key, self._k.sealing.path_of(slot))
        again = self._k.sealing.result_resealed(data, source=child.key, target=target)
        return Completed(self._k.codec.encode(again, slot))

    def _undo(self, found: Snapshot, step: ChildFlow) -> Ran:
        """Undo the step's child, then wait for its undo to be over (or go on at once)."""
        record = found.record
        plan = self._k.plan_for(record)
        effect = record.live_effect(record.position.effect_name)
        child_key = effect.child if effect is not None else None
        if child_key is None:
            return self._commit(found, plan, Completed({}))
        if step.undo_note is not None:  # the harness records the step's undo here
            step.undo_note(self._execution.context(self._k.planning_flow(record), record))
        undo = wake_task(plan, record, child_key, undo_waiting_position(record))
        why = f"its parent flow {record.flow_id} is undoing step {record.position.step!r}"
        try:
            child = self._undo_child(child_key, undo, why)
        except InvalidTransition:
            return Ran.BUSY  # a step of the child is running: undo once it has committed
        over = undo_outcome(child)
        if over is not None:
            return self._commit(found, plan, over)
        ran = self._write(found, lambda current: await_undo(plan, current, child_key).stored())
        # Its undo may have ended before this commit: its task then came early, so look.
        latest = self._k.store.get(child_key)
        if ran is Ran.ADVANCED and undo_outcome(latest) is not None:
            self._k.queue.ensure(record.key, undo)
        return ran

    def _undo_child(self, child_key: str, undo: NextTask, why: str) -> FlowRecord | None:
        """Ask the child to undo itself and to wake ``undo`` when that is over; the child."""
        child = self._k.store.get(child_key)
        if child is None:
            return None
        try:
            child_plan = self._k.plan_for(child)
        except UnknownFlow:
            return child

        def change(current: FlowRecord) -> FlowRecord | None:
            return undone_for_parent(child_plan, current, undo, why)

        errors: list[InvalidTransition] = []

        def guarded(current: FlowRecord) -> FlowRecord | None:
            try:
                return change(current)
            except InvalidTransition as exc:
                errors.append(exc)
                return None

        written = self._k.store.change(child_key, guarded)
        if errors:
            raise errors[-1]
        if written is not None:
            self._k.settle(written)
            return written
        return self._k.store.get(child_key)

    def _undone(self, found: Snapshot) -> Ran:
        """The child's undo is over (or not yet: a repeat): the parent's saga goes on."""
        record = found.record
        plan = self._k.plan_for(record)
        effect = record.live_effect(record.position.effect_name)
        child_key = effect.child if effect is not None else None
        child = self._k.store.get(child_key) if child_key else None
        over = undo_outcome(child)
        if over is None:
            return Ran.STALE
        return self._commit(found, plan, over)

    def _stale(self, found: Snapshot, pos: Position, flow: Flow) -> Ran | None:
        """A task no track is at: a redelivered ``CHILD`` whose commit landed (its child may
        not exist yet: made here), or an undo's wake that came before the undo waited (409:
        come again). Anything else: the usual stale path."""
        record = found.record
        if pos.kind is TaskKind.CHILD_UNDO:
            before = pos.model_copy(update={"kind": TaskKind.COMPENSATE})
            return Ran.BUSY if same_try(record, before) is not None else None
        if pos.kind is not TaskKind.CHILD:
            return None
        key = same_try(record, waiting_position_of(pos))
        if key is None:
            return None
        child_key = record.tracks[key].child
        step = self._k.kinds.container(flow, pos.scope).step(pos.step_index)
        if child_key is None or not isinstance(step, ChildFlow):
            return None
        made = self._child_input(record.focused(key), step, child_key)
        if not isinstance(made, Failed):
            self._ensure_child(record.key, step, made, child_key)
        self._k.settle(record)
        return Ran.STALE

    def _commit(self, found: Snapshot, plan: Plan, outcome: Outcome) -> Ran:
        """Take ``outcome`` of the focused task into account, if its track is still there."""
        return self._write(found, lambda current: planner.after(plan, current, outcome), plan)

    def _write(self, found: Snapshot, change: Any, plan: Plan | None = None) -> Ran:
        position = found.record.position
        plan = plan or self._k.plan_for(found.record)

        def next_record(latest: FlowRecord) -> FlowRecord | None:
            key = same_try(latest, position)
            if key is None:
                return None
            current = latest.focused(key)
            return fitting(plan, current, change(current))

        return self._k.write(found, next_record)


def undone_for_parent(plan: Plan, child: FlowRecord, undo: NextTask, why: str) -> FlowRecord:
    """``child`` asked by its parent to undo itself, waking ``undo`` once that is over: a
    running child is cancelled, one that succeeded has its effects undone (its clean-up); one
    that failed undid itself, one compensating or cleaning up is on its way."""
    assert child.child_of is not None
    linked = child.model_copy(update={"child_of": child.child_of.model_copy(update={"undo": undo})})
    if child.status is Status.SUCCEEDED and not child.cleaning:
        return undo_for_parent(plan, linked, why) or linked.stored()
    if child.status in TERMINAL or child.status is Status.COMPENSATING:
        return linked.stored()
    return planner.cancel(plan, linked, why, by="parent flow")


def same_try(record: FlowRecord, position: Position) -> str | None:
    """The track at this try of ``position``'s step, whatever its rescue and deferral numbers
    (the task a child makes names the try it was made for)."""
    if record.status not in ACTIVE and not record.cleaning:
        return None
    return next((k for k, t in record.tracks.items() if t.position.same_try(position)), None)


def waiting_for(record: FlowRecord, child_key: str) -> str | None:
    """The track of ``record`` that waits for child ``child_key``, if one does."""
    if record.status not in ACTIVE:
        return None
    return next(
        (
            k
            for k, t in record.tracks.items()
            if t.child == child_key and t.position.kind is TaskKind.CHILD_WAIT
        ),
        None,
    )


def waiting_position_of(pos: Position) -> Position:
    """Where a child step at ``CHILD`` position ``pos`` waits once it has noted its child."""
    return pos.model_copy(update={"kind": TaskKind.CHILD_WAIT, "deferral": 0, "rescue": 0})


def check_children(registry: Registry) -> None:
    """Every ChildFlow step names a registered flow (and version): ConfigError if not, naming
    the step."""
    for flow in registry:
        for step in _steps(flow):
            if not isinstance(step, ChildFlow):
                continue
            try:
                registry.get(step.flow, step.version)
            except UnknownFlow as exc:
                raise ConfigError(f"child step {step.name!r} of {flow.label}: {exc}") from None


def _steps(flow: Flow) -> list[Any]:
    found: list[Any] = []
    for step in flow.steps:
        found.append(step)
        inner = getattr(step, "item_flow", None)
        if isinstance(inner, Flow):
            found += _steps(inner)
    return found


__all__ = ["Children", "check_children", "waiting_position"]

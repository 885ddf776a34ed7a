"""ForEach steps: a small flow of item steps, run once per item in lanes of their own.

Also the planner's lane bookkeeping: the ForEach fans out into lanes (each a document of its
own, ``lane_id``), hears from them (items failed, lane ended), joins their outputs, and, before
undoing, gathers their items' effects.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

from relayflow.core.flows import Flow, ForEach, Handler, Step
from relayflow.core.kinds.action import retried
from relayflow.core.kinds.base import Kind, Wrap
from relayflow.core.planner.forward import advance, after
from relayflow.core.planner.history import log, new_entry
from relayflow.core.planner.plan import Completed, Plan, Retry, Waiting, schedule
from relayflow.core.planner.saga import begin_failure, compensate_next
from relayflow.core.planner.starts import first_position, start_ready
from relayflow.core.planner.states import finish, move, stop_all, with_next
from relayflow.core.position import TaskKind, split_effect_name
from relayflow.core.records import Effect, FanOut, FlowRecord, Result
from relayflow.core.state import TERMINAL, Status


class Items(Kind):
    step_type: ClassVar[type] = ForEach
    name: ClassVar[str] = "foreach"
    forward: ClassVar[TaskKind] = TaskKind.FANOUT
    # The engine's own tasks: list the items and start the lanes, join their outputs, and
    # gather their effects before undoing.
    tasks: ClassVar[frozenset[TaskKind]] = frozenset(
        {TaskKind.FANOUT, TaskKind.JOIN, TaskKind.GATHER}
    )

    own: ClassVar[frozenset[TaskKind]] = tasks

    def handler(self, step: Step, task: TaskKind) -> Handler | None:
        return None  # the engine runs a ForEach's tasks itself

    def done(self, plan: Plan, record: FlowRecord, output: dict[str, Any]) -> FlowRecord:
        if record.position.kind is not TaskKind.JOIN:  # no items: done at once
            return advance(plan, record, output)
        fan = record.tracks[record.position.step].fanout
        assert fan is not None  # its output may be offloaded: its counts are the fan-out's
        seen = f"items done ({fan.total}, {len(fan.failed)} failed)"
        return advance(plan, record, output, seen=seen)

    def again(self, plan: Plan, record: FlowRecord, outcome: Retry | Waiting) -> FlowRecord:
        return retried(plan, record, outcome)

    def inner(self, step: Step) -> Flow | None:
        assert isinstance(step, ForEach)
        return step.item_flow

    def describe(self, step: Step) -> str:
        assert isinstance(step, ForEach)
        return f"for each item, {step.concurrency} at a time, tolerating {step.tolerate}"

    def wrapped(self, step: Step, wrap: Wrap) -> Step:
        raise AssertionError("a ForEach's item steps are wrapped one by one")

    def with_steps(self, step: Step, steps: tuple[Step, ...]) -> Step:
        """``step`` with other item steps (the harness wraps or scripts them)."""
        assert isinstance(step, ForEach)
        return replace(step, steps=steps)  # type: ignore[arg-type]


def lane_id(key: str, scope: str, lane: int, generation: int = 0) -> str:
    """The document id of ForEach ``scope``'s lane ``lane`` of the flow keyed ``key``, in the
    flow's ``generation``: a retry that runs the ForEach again gets lanes of its own, while the
    earlier run's lanes stay as they ended."""
    base = f"{key}.{scope}.{lane}"
    return base if generation == 0 else f"{base}.g{generation}"


def lane_of(record: FlowRecord, scope: str, lane: int) -> str | None:
    """The id of lane ``lane`` of ForEach ``scope`` in the flow's current run, if it has one."""
    base = lane_id(record.key, scope, lane)
    return next((i for i in record.lanes if i == base or i.startswith(f"{base}.g")), None)


def fanned_out(plan: Plan, record: FlowRecord, items: list[Any]) -> FlowRecord:
    """The focused ForEach has listed its ``items``: it now runs them in lanes (created by the
    engine after this commit), or, with no items, is done at once."""
    each = plan.flow.named(record.position.step)
    assert isinstance(each, ForEach)
    if not items:
        return after(plan, record, Completed({"items": [], "failed": []}))
    lanes = min(each.concurrency, len(items))
    fan = FanOut(total=len(items), lanes=lanes)
    detail = f"{len(items)} items in {lanes} lanes"
    record = log(plan, record, new_entry(plan, record, "fanned out", detail=detail), a_try=False)
    key = record.position.step
    generation = record.position.generation
    ids = [lane_id(record.key, key, k, generation) for k in range(lanes)]
    tracks = {**record.tracks, key: record.tracks[key].model_copy(update={"fanout": fan})}
    moved = move(plan, record, Status.RUNNING)
    return moved.model_copy(update={"tracks": tracks, "lanes": [*record.lanes, *ids]}).stored()


def lanes_started(record: FlowRecord) -> FlowRecord:
    """The focused ForEach's lanes exist: its own task is done (the lanes report to it)."""
    return record.model_copy(update={"next": None}).stored()


def new_lane(
    plan: Plan, parent: FlowRecord, *, scope: str, lane: int, items: list[Any]
) -> FlowRecord:
    """Lane ``lane`` of ForEach ``scope`` (``plan`` is for the ForEach's item steps): items
    lane, lane + lanes, …, its first item due now. It shares the flow's input and
    incarnation, so its idempotency keys are the flow's.

    It starts with the effects an earlier run's items of its own left with the flow (a retried
    flow runs its ForEach again): one that was undone makes its item's step call under a fresh
    key, and one that may still be live is replayed under its own rather than made twice."""
    stride = min(len(items), concurrency(parent, scope, plan))
    mine = [{"index": i, "item": items[i]} for i in range(lane, len(items), stride)]
    # The id its fan-out listed (a fan-out committed by an earlier release named lanes of a
    # later generation without the suffix).
    listed = lane_of(parent, scope, lane)
    lane_key = listed or lane_id(parent.key, scope, lane, parent.position.generation)
    indexes = {item["index"] for item in mine}
    record = FlowRecord(
        flow_id=lane_key,
        flow=parent.flow,
        version=parent.version,
        input=parent.input,
        status=Status.PENDING,
        position=first_position(plan),
        created_at=parent.created_at,
        updated_at=plan.now,
        trace=parent.trace,
        deadline_at=parent.deadline_at,  # the flow's deadline bounds its items too
        tenant=parent.tenant,
        priority=parent.priority,
        # Its own shard, from its own key: a big ForEach's lanes spread over every shard.
        queue_shard=plan.queues.shard_of(lane_key),
        parent=parent.key,
        scope=scope,
        lane=lane,
        items=mine,
        effects=[e for e in parent.effects if _item_of(e, scope) in indexes],
    )
    return start_ready(plan, record, generation=parent.position.generation)


def _item_of(effect: Effect, scope: str) -> int | None:
    """The item of ForEach ``scope`` that made ``effect`` (None if no item of it did)."""
    owner, index, _ = split_effect_name(effect.step)
    return index if owner == scope else None


def concurrency(parent: FlowRecord, scope: str, plan: Plan) -> int:
    """How many lanes ForEach ``scope`` runs (as it fanned out: its items' stride)."""
    track = parent.tracks.get(scope)
    assert track is not None and track.fanout is not None
    return track.fanout.lanes


def lane_reported(
    plan: Plan, record: FlowRecord, *, lane: int, failed: list[int], ended: bool, detail: str
) -> FlowRecord | None:
    """Lane ``lane`` of the focused ForEach reports items that failed for good and, when it has
    run all its items, that it ended. More failed items than tolerated fail the flow; when every
    lane has ended the ForEach's join is due. None if it changes nothing (a repeat)."""
    each = plan.flow.named(record.position.step)
    track = record.tracks[record.position.step]
    assert isinstance(each, ForEach) and track.fanout is not None
    fan = track.fanout
    now_failed = sorted(set(fan.failed) | set(failed))
    now_ended = sorted(set(fan.ended) | ({lane} if ended else set()))
    if (now_failed, now_ended) == (fan.failed, fan.ended):
        return None
    fan = fan.model_copy(update={"failed": now_failed, "ended": now_ended})
    tracks = {**record.tracks, record.position.step: track.model_copy(update={"fanout": fan})}
    record = record.model_copy(update={"tracks": tracks})
    if len(now_failed) > each.tolerate:
        message = f"{len(now_failed)} of {fan.total} items failed (tolerated: {each.tolerate})"
        err: dict[str, Any] = {"code": "ITEMS_FAILED", "step": each.name}
        err["message"] = f"{message}; {detail}"[:2000]
        err["items"] = now_failed[:100]
        return begin_failure(plan, record, Status.FAILED, err, "items failed").stored()
    if len(now_ended) < fan.lanes:
        return record.stored()
    join = record.position.model_copy(update={"kind": TaskKind.JOIN})
    moved = record.model_copy(update={"position": join})
    return with_next(moved, schedule(plan, moved, join, 0.0)).stored()


def cancel_lane(plan: Plan, record: FlowRecord) -> FlowRecord | None:
    """Stop a lane (its flow is being undone): its pending tasks become stale; nothing is
    reported back (the flow stopped it). None if it has ended already."""
    if record.status in TERMINAL:
        return None
    result = Result(status=Status.CANCELLED, code="CANCELLED", message="the flow is being undone")
    ended = finish(plan, stop_all(record), result)
    return ended.model_copy(update={"result_published": True}).stored()


def join_output(outputs: dict[str, Any], failed: set[int], total: int) -> dict[str, Any]:
    """A ForEach's output: each item's output (``outputs``, by index) in the list's order, and
    the failed indexes."""
    items = [outputs.get(str(i)) for i in range(total)]
    return {"items": items, "failed": sorted(failed)}


def gathered(plan: Plan, record: FlowRecord, effects: list[Effect]) -> FlowRecord:
    """The lanes are stopped and ``effects`` are their items' effects: undo from here.

    An effect is one step's ``n``-th: a lane's word on one the flow holds already (an earlier
    run's, which this run's item replayed) is the newer."""
    newer = {(e.step, e.n): e for e in effects}
    merged = [newer.pop((e.step, e.n), e) for e in record.effects]
    merged += newer.values()
    entry = new_entry(plan, record, "gathered", detail=f"{len(effects)} item effects from lanes")
    record = log(plan, record, entry, a_try=False)
    record = record.model_copy(update={"effects": merged, "gathered": True})
    assert record.pending_result is not None
    return compensate_next(plan, stop_all(record), record.pending_result).stored()

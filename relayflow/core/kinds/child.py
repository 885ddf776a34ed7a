"""ChildFlow steps: start another registered flow and wait for its end, holding no task.

A child step's tasks are the engine's own (``engine.children``), in this order:

- ``CHILD`` (attempt a): the step notes its child's key (``child_id``: from the parent flow's
  id, the step, the item, the generation and the attempt, so every duplicate names one child)
  and moves to ``CHILD_WAIT`` in one commit, with the child's effect noted as begun; only then
  is the child's document created (a create that fails if it exists). The child cannot end
  before the parent waits for it, so its end never finds a parent that is not listening.
- ``CHILD_WAIT``: the step's only task is the parent's deadline, if it has one. The child's
  document names its parent (``ChildOf``) and the task its end makes (``wakes``, made by
  ``Kernel.settle`` before the child's result event goes out), named from the child's key: a
  repeat is a no-op. The task reads the child: ended, the step ends with it (its output, or
  its error, when ``retry`` allows another try a fresh child); not ended, nothing changes.
- Undoing the step (``COMPENSATE``) undoes the child: a running one is cancelled, one that
  succeeded has its effects undone newest first (its clean-up), one that failed has undone
  itself. The parent then waits (``CHILD_UNDO``) until the child's undo is over, so the
  parent's older effects are undone only after the child's: newest first across the two.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any, ClassVar

from relayflow.core.errors import PermanentError
from relayflow.core.flows import ChildFlow, Handler, RetryPolicy, Step, StepContext
from relayflow.core.kinds.base import Kind, Wrap
from relayflow.core.planner.cleanup import cleanup_track
from relayflow.core.planner.effects import (
    begin_effect,
    next_compensation,
    set_effect,
    undo_position,
)
from relayflow.core.planner.forward import advance, fail
from relayflow.core.planner.history import log, new_entry, timeout_of
from relayflow.core.planner.plan import (
    MAX_SCHEDULE_AHEAD_S,
    Completed,
    Failed,
    Outcome,
    Plan,
    Retry,
    Waiting,
    schedule,
    step_of,
)
from relayflow.core.planner.reset import after_undo
from relayflow.core.planner.saga import begin_failure
from relayflow.core.planner.states import move, with_next
from relayflow.core.position import Position, TaskKind, task_id
from relayflow.core.records import (
    ChildOf,
    Cleanup,
    CleanupState,
    EffectState,
    FlowRecord,
    NextTask,
    split_key,
)
from relayflow.core.sharding import spread
from relayflow.core.state import ACTIVE, TERMINAL, Status

# Flow ids are at most 100 characters (FLOW_ID_PATTERN); a child's id is its parent's and a
# readable suffix, or, when that is longer, a cut of both and a hash of the whole.
MAX_ID = 100
_HASH_DIGITS = 16
CHILD_TASKS = frozenset({TaskKind.CHILD, TaskKind.CHILD_WAIT, TaskKind.CHILD_UNDO})


class Child(Kind):
    step_type: ClassVar[type] = ChildFlow
    name: ClassVar[str] = "child"
    forward: ClassVar[TaskKind] = TaskKind.CHILD
    tasks: ClassVar[frozenset[TaskKind]] = CHILD_TASKS | {TaskKind.COMPENSATE}
    # Starting a child is an effect (the child's effects are the step's): claimed in the
    # sense that counts for an operator — a flow whose create claimed the step for its first
    # delivery is cancelled only once that has committed — and undone by the saga.
    claimed: ClassVar[frozenset[TaskKind]] = frozenset({TaskKind.CHILD})
    # All of them the engine's own (``engine.children``): no handler of the flow's runs.
    own: ClassVar[frozenset[TaskKind]] = tasks
    # In a ForEach, an item's output stays in its child: the parent keeps a summary.
    keeps_output: ClassVar[bool] = False

    def handler(self, step: Step, task: TaskKind) -> Handler | None:
        if task is not TaskKind.COMPENSATE:
            return None
        assert isinstance(step, ChildFlow)
        return step.undo_note or undo_child

    def retries(self, task: TaskKind) -> bool:
        return False  # a fresh child is a retry of the step, not of a dependency's call

    def compensation(self, step: Step) -> Handler | None:
        return undo_child  # the saga undoes the step: the engine undoes the child

    def retry(self, step: Step) -> RetryPolicy | None:
        assert isinstance(step, ChildFlow)
        return step.retry

    def after(self, plan: Plan, record: FlowRecord, outcome: Outcome) -> FlowRecord:
        """The forward tasks' outcomes, as ``engine.children`` makes them: the child noted
        (``CHILD``), or the child's end (``CHILD_WAIT``); the undo's (``CHILD_UNDO``) is the
        saga's (or a reset's)."""
        kind = record.position.kind
        if kind is TaskKind.CHILD_UNDO:
            return after_undo(plan, record, outcome)
        if isinstance(outcome, Failed) and kind is TaskKind.CHILD:
            return fail(plan, record, outcome.error)
        if kind is TaskKind.CHILD:
            assert isinstance(outcome, Completed)
            return await_child(plan, record, str(outcome.output["child"]))
        if isinstance(outcome, Completed):
            return child_succeeded(plan, record, outcome.output)
        assert isinstance(outcome, Failed)
        return child_failed(plan, record, outcome.error)

    def again(self, plan: Plan, record: FlowRecord, outcome: Retry | Waiting) -> FlowRecord:
        raise AssertionError("a child step is never retried by its own task")

    def describe(self, step: Step) -> str:
        assert isinstance(step, ChildFlow)
        version = "" if step.version is None else f" v{step.version}"
        tries = step.retry.max_attempts
        return f"child flow {step.flow}{version}" + (
            f", up to {tries} children" if tries > 1 else ""
        )

    def wrapped(self, step: Step, wrap: Wrap) -> Step:
        """The child's steps are recorded as the child's; the step's undo is noted when the
        engine begins to undo the child."""
        assert isinstance(step, ChildFlow)
        return replace(step, undo_note=wrap(step.name, TaskKind.COMPENSATE, undo_child))


def undo_child(ctx: StepContext) -> None:
    """What the saga sees as a child step's compensation: the engine undoes the child itself
    (``engine.children``); this only marks, doing nothing, when that begins."""
    return None


def child_id(parent: FlowRecord, position: Position) -> str:
    """The id of the child that try ``position`` of a child step of ``parent`` starts: from the
    parent flow's id, the step, the item, the generation and the attempt, so every duplicate
    delivery names the same child and a retry a fresh one. At most ``MAX_ID`` characters."""
    flow_id = root_id(parent)
    item = "" if position.item is None else f"-i{position.item}"
    scope = "" if position.scope is None else f"-{position.scope}"
    suffix = f"{scope}{item}-{position.step}-g{position.generation}a{position.attempt}"
    whole = f"{flow_id}{suffix}"
    if len(whole) <= MAX_ID:
        return whole
    digest = f"{spread(whole):016x}"
    keep = MAX_ID - _HASH_DIGITS - 1
    return f"{whole[:keep]}-{digest}"


def root_id(record: FlowRecord) -> str:
    """The id of the flow ``record`` belongs to (a lane's: its flow's)."""
    key = record.parent if record.is_lane and record.parent is not None else record.key
    return split_key(key)[1]


def wake_task(plan: Plan, parent: FlowRecord, child_key: str, at: Position) -> NextTask:
    """The task a child's end (or its undo's) makes for ``parent`` at ``at``: on the parent's
    queue, named from the child's key (not the parent's position: the deadline task has that
    name), so the child's every settle makes one task."""
    made = schedule(plan, parent, at, 0.0)
    name = task_id(child_key, at)
    return made.model_copy(update={"task_id": name})


def child_of(plan: Plan, parent: FlowRecord, child_key: str, wait: Position) -> ChildOf:
    """What a child's document says of its parent, waiting at ``wait``."""
    return ChildOf(
        key=parent.key,
        flow_id=root_id(parent),
        step=wait.step,
        scope=wait.scope,
        item=wait.item,
        generation=wait.generation,
        wake=wake_task(plan, parent, child_key, wait),
    )


def waiting_position(record: FlowRecord) -> Position:
    """Where the focused child step waits for its child (from its ``CHILD`` position)."""
    return record.position.model_copy(update={"kind": TaskKind.CHILD_WAIT, "deferral": 0})


def await_child(plan: Plan, record: FlowRecord, child_key: str) -> FlowRecord:
    """The focused child step has named its child: it waits for it, its effect begun (so an
    undo from now on undoes the child), holding no task but the flow's deadline."""
    key = record.focus
    assert key is not None
    record = begin_effect(plan, record)
    record = set_effect(record, record.position.effect_name, child=child_key)
    entry = new_entry(plan, record, "child started", detail=split_key(child_key)[1])
    wait = waiting_position(record)
    tracks = {**record.tracks, key: record.tracks[key].model_copy(update={"child": child_key})}
    moved = move(plan, log(plan, record, entry), Status.RUNNING).model_copy(
        update={"tracks": tracks, "position": wait, "next": None}
    )
    return with_deadline(plan, moved)


def with_deadline(plan: Plan, record: FlowRecord) -> FlowRecord:
    """The waiting step's one task: the flow's deadline (none without one). Cloud Tasks
    schedules at most 30 days ahead, so a later deadline is a chain of tasks at most
    ``MAX_SCHEDULE_AHEAD_S`` apart, each named by when it runs."""
    deadline = record.deadline_at
    if deadline is None:
        return record.model_copy(update={"next": None})
    delay = min(max((deadline - plan.now).total_seconds(), 0.0), MAX_SCHEDULE_AHEAD_S)
    made = schedule(plan, record, record.position, delay)
    named = made.model_copy(update={"task_id": f"{made.task_id}-t{int(made.run_at.timestamp())}"})
    return with_next(record, named)


def deadline_passed(plan: Plan, record: FlowRecord) -> FlowRecord:
    """The flow's deadline passed while the step waited: TIMED_OUT (its undo cancels the
    child)."""
    message = "the flow's deadline passed while it waited for its child flow"
    err = timeout_of(record, "DEADLINE_EXCEEDED", message)
    return begin_failure(plan, record, Status.TIMED_OUT, err, "deadline passed")


def child_succeeded(plan: Plan, record: FlowRecord, output: dict[str, Any]) -> FlowRecord:
    """The child succeeded: the step's output is the child's, its effect done."""
    name = record.position.effect_name
    record = set_effect(record, name, state=EffectState.DONE, done_at=plan.now)
    return advance(plan, record, output, seen="child succeeded")


def child_failed(plan: Plan, record: FlowRecord, error: PermanentError) -> FlowRecord:
    """The child ended without succeeding (it undid what it did): a fresh child if the step's
    retry policy allows another try, else the step fails with the child's error."""
    pos = record.position
    record = set_effect(record, pos.effect_name, state=EffectState.UNDONE, done_at=plan.now)
    step = step_of(plan, pos)
    assert isinstance(step, ChildFlow)
    tries = pos.attempt + 1
    if tries >= step.retry.max_attempts:
        return fail(plan, record, error)
    delay = step.retry.delay_s(retry=pos.attempt, key=f"{record.flow_id}:{pos.step}:child")
    if record.deadline_at is not None and plan.now + timedelta(seconds=delay) > record.deadline_at:
        return fail(plan, record, error)
    entry = new_entry(plan, record, "child failed", detail=error.message, delay_s=delay)
    nxt = pos.model_copy(update={"kind": TaskKind.CHILD, "attempt": tries, "deferral": 0})
    key = record.focus
    assert key is not None
    tracks = {**record.tracks, key: record.tracks[key].model_copy(update={"child": None})}
    moved = log(plan, record, entry).model_copy(update={"position": nxt, "tracks": tracks})
    return with_next(moved, schedule(plan, moved, nxt, delay))


def child_outcome(child: FlowRecord | None) -> Outcome | None:
    """What a child's end means for its step (None: it has not ended)."""
    if child is None:
        return Failed(PermanentError("the child flow is gone", code="CHILD_GONE"))
    if child.status not in TERMINAL or child.result is None:
        return None
    result = child.result
    if child.status is Status.SUCCEEDED:
        return Completed(dict(result.data or {}))
    message = f"child flow {child.flow_id} {child.status}: {result.message}"[:2000]
    return Failed(PermanentError(message, code=f"CHILD_{result.code}"[:100]))


def undo_waiting_position(record: FlowRecord) -> Position:
    """Where a child step's undo waits for the child's (from its ``COMPENSATE`` position)."""
    return record.position.model_copy(update={"kind": TaskKind.CHILD_UNDO, "deferral": 0})


def await_undo(plan: Plan, record: FlowRecord, child_key: str) -> FlowRecord:
    """The focused undo of a child step has asked the child to undo itself: it waits for that,
    holding no task (the child's undo's end makes it, ``wakes``)."""
    entry = new_entry(plan, record, "undoing the child", detail=split_key(child_key)[1])
    pos = undo_waiting_position(record)
    moved = log(plan, record, entry, a_try=False).model_copy(update={"position": pos})
    return moved.model_copy(update={"next": None})


def undo_outcome(child: FlowRecord | None) -> Outcome | None:
    """Whether a child's undo is over: its effects undone (Completed), an undo given up
    (Failed), or still going (None)."""
    if child is None:
        return Completed({})
    if child.status in ACTIVE or child.status is Status.COMPENSATING or child.cleaning:
        return None
    if child.cleanup is not None and child.cleanup.state is CleanupState.ABANDONED:
        left = ", ".join(child.cleanup.left) or "some effects"
        return Failed(PermanentError(f"child flow {child.flow_id} left {left} live"))
    failures = (child.result.error or {}) if child.result is not None else {}
    if failures.get("compensation_failures"):
        shown = ", ".join(failures["compensation_failures"])
        return Failed(PermanentError(f"child flow {child.flow_id} could not undo {shown}"))
    return Completed({})


def wakes(record: FlowRecord) -> list[tuple[str, NextTask]]:
    """The tasks a child's document makes for its parent now (each named once): its end's,
    and its undo's once that is over. ``(parent key, task)``."""
    link = record.child_of
    if link is None or record.status not in TERMINAL:
        return []
    made = [(link.key, link.wake)]
    if link.undo is not None and undo_outcome(record) is not None:
        made.append((link.key, link.undo))
    return made


def undo_for_parent(plan: Plan, child: FlowRecord, reason: str) -> FlowRecord | None:
    """A child that succeeded, undone because its parent undoes the step that started it:
    every effect it made is undone by its clean-up, newest first (None: it made none that
    can be undone). ``plan`` is the child's."""
    live = (EffectState.UNKNOWN, EffectState.DONE)
    effects = [
        e.model_copy(update={"state": EffectState.UNDO_PENDING}) if e.state in live else e
        for e in child.effects
    ]
    record = child.model_copy(update={"effects": effects})
    first = next_compensation(plan, record, item=None, states=(EffectState.UNDO_PENDING,))
    if first is None:
        return None
    record = log(
        plan, record, new_entry(plan, record, "undo requested", detail=reason), a_try=False
    )
    window = timedelta(seconds=plan.undo_window_s or 24 * 3600.0)
    cleanup = Cleanup(since=plan.now, until=plan.now + window, reason=reason, by="parent flow")
    rounds = record.position.undo_round + 1
    pos = undo_position(plan, record, first, undo_round=rounds)
    return cleanup_track(plan, record.model_copy(update={"cleanup": cleanup}), pos, 0.0).stored()


# How many failed items' indexes a ForEach of children lists in its output (it counts all).
MAX_FAILED_SHOWN = 100


def children_output(
    parent: FlowRecord, scope: str, lanes: list[FlowRecord], total: int
) -> dict[str, Any]:
    """A ForEach of child flows' output: how many children, which failed (the first
    ``MAX_FAILED_SHOWN``), and how to list them — not their outputs, which stay in each child's
    document, so the parent's document does not grow with the item count (10,000 outputs
    would not fit Firestore's 1 MiB). ``relayflow list --parent ID`` (api ``?parent=ID``)
    pages through the children; child ``i``'s id is ``child_id`` of item ``i``."""
    failed = sorted({i for lane in lanes for i in lane.failed_items})
    return {
        "children": total,
        "succeeded": total - len(failed),
        "failed": failed[:MAX_FAILED_SHOWN],
        "failed_count": len(failed),
        "parent": root_id(parent),
        "step": scope,
    }

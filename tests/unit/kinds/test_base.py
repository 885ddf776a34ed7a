"""relayflow.core.kinds.base: one conformance test over every registered kind of step, and the
registry (``Kinds``) that looks kinds up by step, by position and by task.

Each kind has a sample flow here (``SAMPLES``, keyed by the kind's name) whose first step is of
that kind; a kind registered without one fails the test, so a new kind is checked from the
start.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from relayflow.core import planner
from relayflow.core.flows import (
    ActionStep,
    CallbackStep,
    ChildFlow,
    Flow,
    ForEach,
    IfStep,
    PollStep,
    Sleep,
    Step,
    StepContext,
    WaitForSignal,
)
from relayflow.core.kinds import REGISTRY, Action, Kind, Kinds, step_at
from relayflow.core.planner import Completed, Plan, QueueNames
from relayflow.core.position import Position, TaskKind
from relayflow.core.records import FlowRecord

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
# The tasks the engine does itself (a ForEach's): no handler of the step's runs them.
ENGINE_TASKS = frozenset(
    {
        TaskKind.FANOUT,
        TaskKind.JOIN,
        TaskKind.GATHER,
        # a ChildFlow step's: start the child, await its end, await its undo
        TaskKind.CHILD,
        TaskKind.CHILD_WAIT,
        TaskKind.CHILD_UNDO,
    }
)
# Every task a step may have (a waiting flow's admission task belongs to no step).
STEP_TASKS = frozenset(TaskKind) - {TaskKind.ADMIT}


def noop(ctx: StepContext) -> dict[str, Any]:
    return {}


def yes(ctx: StepContext) -> bool:
    return True


def then(name: str) -> ActionStep:
    return ActionStep(name, noop)


# A flow per kind whose first step is of that kind (with every handler the kind can have),
# and the output its forward task completes with.
SAMPLES: dict[str, tuple[Flow, dict[str, Any]]] = {
    "action": (
        Flow(name="a", steps=(ActionStep("act", noop, compensate=noop), then("next"))),
        {"done": True},
    ),
    "poll": (Flow(name="p", steps=(PollStep("check", noop), then("next"))), {"ready": True}),
    "if": (
        Flow(
            name="i",
            steps=(IfStep("pick", yes, then=("yes",), otherwise=("no",)), then("yes"), then("no")),
        ),
        {"branch": "then"},
    ),
    "callback": (
        Flow(
            name="c",
            steps=(CallbackStep("hook", noop, check=noop, compensate=noop), then("next")),
        ),
        {"sent": True},
    ),
    "sleep": (
        Flow(name="s", steps=(Sleep("nap", until=lambda ctx: NOW), then("next"))),
        {"wake_at": NOW.isoformat()},
    ),
    "signal": (
        Flow(
            name="g",
            steps=(WaitForSignal("approval", signal="approve", timeout_s=60), then("next")),
        ),
        {},
    ),
    "foreach": (
        Flow(
            name="f",
            steps=(ForEach("each", items=lambda ctx: [1], steps=(then("item"),)), then("next")),
        ),
        {"items": [], "failed": []},
    ),
    "child": (
        Flow(name="k", steps=(ChildFlow("spawn", flow="a"), then("next"))),
        {"child": "f-1-spawn-g0a0"},
    ),
}
KINDS = list(REGISTRY)


def sample(kind: Kind) -> tuple[Flow, Step, dict[str, Any]]:
    flow, output = SAMPLES[kind.name]  # KeyError: a registered kind has no sample here
    return flow, flow.step(0), output


def context(step: str) -> StepContext:
    return StepContext(
        flow_id="f-1", flow="f", step=step, input={}, outputs={}, idempotency_key="k"
    )


def at(step: Step, task: TaskKind) -> Position:
    return Position(step_index=0, step=step.name, kind=task)


def started(flow: Flow) -> tuple[Plan, FlowRecord]:
    plan = Plan(definition=flow, queues=QueueNames(), now=NOW, kinds=REGISTRY)
    record = planner.new_record(plan, flow_id="f-1", input={}, message_id=None, deadline_s=None)
    return plan, record.focused(flow.step(0).name)


def test_every_registered_kind_has_a_sample() -> None:
    assert {kind.name for kind in REGISTRY} == set(SAMPLES)


def test_kinds_are_told_apart_by_their_step_type_and_name() -> None:
    assert len({kind.step_type for kind in KINDS}) == len(KINDS)
    assert len({kind.name for kind in KINDS}) == len(KINDS)


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
def test_its_tasks_include_what_it_runs_forward_claims_and_waits_on(kind: Kind) -> None:
    assert kind.forward in kind.tasks
    assert kind.claimed <= kind.tasks
    assert kind.waiting <= kind.tasks
    assert kind.tasks <= STEP_TASKS
    assert kind.makes_effects == kind.claims(kind.forward)
    assert all(kind.claims(task) == (task in kind.claimed) for task in STEP_TASKS)
    assert all(kind.waits(task) == (task in kind.waiting) for task in STEP_TASKS)


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
def test_the_registry_finds_it_for_a_step_of_its_kind(kind: Kind) -> None:
    flow, step, _ = sample(kind)
    assert REGISTRY.of(step) is kind
    assert REGISTRY.at(flow, at(step, kind.forward)) is kind


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
def test_a_position_fits_for_its_own_tasks_and_not_for_another_kinds(kind: Kind) -> None:
    _, step, _ = sample(kind)
    for task in kind.tasks:
        assert kind.fits(step, at(step, task)) == "", task
    for task in STEP_TASKS - kind.tasks:
        assert "changed kind" in kind.fits(step, at(step, task)), task
    for other in KINDS:
        if other is not kind:
            _, theirs, _ = sample(other)
            assert kind.fits(theirs, at(theirs, kind.forward)) != "", other.name


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
def test_a_handler_runs_every_task_the_engine_does_not_do_itself(kind: Kind) -> None:
    _, step, _ = sample(kind)
    for task in kind.tasks:
        handler = kind.handler(step, task)
        assert (handler is None) == (task in ENGINE_TASKS), task
        assert handler is None or callable(handler)


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
def test_wrapping_wraps_every_handler_it_has(kind: Kind) -> None:
    # given a wrap that notes each call of a wrapped handler
    _, step, _ = sample(kind)
    calls: list[tuple[str, TaskKind]] = []

    def wrap(name: str, task: TaskKind, handler: Callable[..., Any]) -> Callable[..., Any]:
        def noted(ctx: StepContext) -> Any:
            calls.append((name, task))
            return handler(ctx)

        return noted

    # when the step is wrapped (the steps inside it, one by one, for a kind that has them)
    inner = kind.inner(step)
    if inner is not None:
        wrapped = kind.with_steps(step, tuple(REGISTRY.of(s).wrapped(s, wrap) for s in inner.steps))
        inside = kind.inner(wrapped)
        assert inside is not None
        for s in inside.steps:
            handler = REGISTRY.of(s).handler(s, REGISTRY.of(s).forward)
            assert handler is not None
            handler(context(s.name))
        assert calls == [(s.name, REGISTRY.of(s).forward) for s in inner.steps]
        return
    wrapped = kind.wrapped(step, wrap)

    # then every task's handler notes its call, as the task it runs for
    tasks = sorted(task for task in kind.tasks if kind.handler(step, task) is not None)
    for task in tasks:
        handler = kind.handler(wrapped, task)
        assert handler is not None
        handler(context(step.name))
    assert calls == [(step.name, task) for task in tasks]
    assert REGISTRY.of(wrapped) is kind


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
def test_it_is_described_for_relayflow_graph(kind: Kind) -> None:
    _, step, _ = sample(kind)
    assert kind.describe(step).strip()


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
def test_a_kind_that_makes_effects_retries_them_and_can_undo_them(kind: Kind) -> None:
    _, step, _ = sample(kind)
    assert (kind.retry(step) is not None) == kind.makes_effects
    assert (kind.compensation(step) is not None) == (TaskKind.COMPENSATE in kind.tasks)


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
def test_the_planner_hands_a_completed_forward_task_to_its_kind(kind: Kind) -> None:
    # given a flow just started at a step of this kind
    flow, step, output = sample(kind)
    plan, record = started(flow)
    assert record.position == at(step, kind.forward)

    # when its forward task completes
    done = kind.after(plan, record, Completed(output))

    # then the step moved on (its history says so), just as the planner's dispatcher has it
    assert done.history[-1].step == step.name
    assert done.position != record.position or step.name in done.outputs
    assert planner.after(plan, record, Completed(output)) == done.stored()


# The registry: kinds looked up by step, by position and by task.

ITEMS = ForEach(
    "each",
    items=lambda ctx: [1, 2],
    steps=(ActionStep("charge", noop, dependency="payments"), PollStep("settle", noop)),
)
WITH_ITEMS = Flow(
    name="w",
    steps=(ActionStep("reserve", noop, dependency="stock"), ITEMS, then("notify")),
)


def test_a_step_of_no_registered_kind_is_a_type_error() -> None:
    actions_only = Kinds((Action(),))
    poll = PollStep("check", noop)
    with pytest.raises(TypeError, match="no kind is registered for a PollStep"):
        actions_only.of(poll)
    assert actions_only.of(ActionStep("act", noop)).name == "action"


def test_claims_and_waits_are_answered_for_a_task_whichever_kind_has_it() -> None:
    claimed = {task for task in STEP_TASKS if REGISTRY.claims(task)}
    waiting = {task for task in STEP_TASKS if REGISTRY.waits(task)}
    # (a ChildFlow's start: starting the child is the step's effect)
    assert claimed == {TaskKind.ACTION, TaskKind.COMPENSATE, TaskKind.CHILD}
    assert waiting == {TaskKind.POLL, TaskKind.WAIT}


def test_an_items_step_is_found_inside_its_foreach() -> None:
    # given the position of the second item step of ForEach ``each``
    position = Position(step_index=1, step="settle", kind=TaskKind.POLL, scope="each", item=0)
    # then it names the item step, not the flow's second step (the ForEach itself)
    assert step_at(WITH_ITEMS, position, REGISTRY).name == "settle"
    assert REGISTRY.at(WITH_ITEMS, position).name == "poll"
    outside = Position(step_index=1, step="each", kind=TaskKind.FANOUT)
    assert step_at(WITH_ITEMS, outside, REGISTRY) is ITEMS


def test_the_item_steps_of_a_foreach_are_its_inner_flow() -> None:
    assert [s.name for s in REGISTRY.inner(WITH_ITEMS, "each").steps] == ["charge", "settle"]
    with pytest.raises(KeyError, match="'reserve' of 'w' runs no steps inside it"):
        REGISTRY.inner(WITH_ITEMS, "reserve")


def test_the_container_of_item_steps_is_their_flow_unless_planning_one_already() -> None:
    items = REGISTRY.inner(WITH_ITEMS, "each")
    assert REGISTRY.container(WITH_ITEMS, None) is WITH_ITEMS
    assert REGISTRY.container(WITH_ITEMS, "each") is items
    # a lane's plan is for the item steps: ``each`` is not one of them
    assert REGISTRY.container(items, "each") is items


def test_dependencies_are_every_one_a_step_names_the_item_steps_too() -> None:
    polling = Flow(name="p", steps=(PollStep("check", noop, dependency="status-api"),))
    assert REGISTRY.dependencies([WITH_ITEMS, polling]) == {"stock", "payments", "status-api"}
    assert REGISTRY.dependencies([SAMPLES["action"][0]]) == set()

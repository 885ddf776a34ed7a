"""relayflow.core.kinds: one conformance test over every registered kind of step.

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
    Flow,
    ForEach,
    IfStep,
    PollStep,
    Step,
    StepContext,
)
from relayflow.core.kinds import REGISTRY, Kind
from relayflow.core.planner import Completed, Plan, QueueNames
from relayflow.core.position import Position, TaskKind
from relayflow.core.records import FlowRecord

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
# The tasks the engine does itself (a ForEach's): no handler of the step's runs them.
ENGINE_TASKS = frozenset({TaskKind.FANOUT, TaskKind.JOIN, TaskKind.GATHER})
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
    "foreach": (
        Flow(
            name="f",
            steps=(ForEach("each", items=lambda ctx: [1], steps=(then("item"),)), then("next")),
        ),
        {"items": [], "failed": []},
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

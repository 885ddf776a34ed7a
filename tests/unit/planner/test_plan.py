"""relayflow.core.planner.plan: which queue serves which task (high-priority flows' on their own
when there are queues for them), a next task's schedule (capped at what Cloud Tasks takes), the
step a position names, and a plan without a definition.

The flow under test is ``tests.unit.planner.sample``'s (see there).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from relayflow.core.errors import UnknownFlow
from relayflow.core.flows import ActionStep, Flow, ForEach, PollStep
from relayflow.core.kinds import REGISTRY
from relayflow.core.planner import MAX_SCHEDULE_AHEAD_S, Plan, QueueNames, schedule, step_of
from relayflow.core.position import Position, TaskKind, task_id
from tests.unit.planner.sample import NOW, QUEUES, noop, plan, started

HIGH = QueueNames(steps="s", polls="p", steps_high="s-high", polls_high="p-high")
POLLED = (TaskKind.POLL, TaskKind.WAIT)
STEPPED = tuple(task for task in TaskKind if task not in POLLED)


@pytest.mark.parametrize("task", STEPPED)
def test_tasks_that_run_a_step_go_to_the_steps_queue(task: TaskKind) -> None:
    assert HIGH.for_kind(task) == "s"
    assert HIGH.for_kind(task, "high") == "s-high"


@pytest.mark.parametrize("task", POLLED)
def test_tasks_that_wait_go_to_the_polls_queue(task: TaskKind) -> None:
    assert HIGH.for_kind(task) == "p"
    assert HIGH.for_kind(task, "high") == "p-high"


def test_without_both_high_queues_high_priority_shares_the_others() -> None:
    half = QueueNames(steps="s", polls="p", steps_high="s-high")
    assert half.for_kind(TaskKind.ACTION, "high") == "s"
    assert QueueNames().for_kind(TaskKind.POLL, "high") == "flow-polls"


def test_a_next_task_is_named_by_its_flow_and_position_and_due_after_its_delay() -> None:
    record = started()
    position = record.position.model_copy(update={"attempt": 1})
    nxt = schedule(plan(), record, position, 12.5)
    assert nxt.task_id == task_id(record.key, position)
    assert (nxt.queue, nxt.position, nxt.run_at) == (
        "q-steps",
        position,
        NOW + timedelta(seconds=12.5),
    )


def test_a_schedule_is_never_in_the_past_nor_past_what_cloud_tasks_takes() -> None:
    record = started()
    assert schedule(plan(), record, record.position, -30).run_at == NOW
    far = schedule(plan(), record, record.position, 10 * MAX_SCHEDULE_AHEAD_S)
    assert far.run_at == NOW + timedelta(seconds=MAX_SCHEDULE_AHEAD_S)
    assert MAX_SCHEDULE_AHEAD_S < 30 * 24 * 3600


def test_a_high_priority_flows_next_task_goes_to_its_queue() -> None:
    record = started().model_copy(update={"priority": "high"})
    high = Plan(definition=plan().definition, queues=HIGH, now=NOW, kinds=REGISTRY)
    assert schedule(high, record, record.position, 0).queue == "s-high"
    assert QUEUES.for_kind(TaskKind.ACTION, "high") == "q-steps"


def test_a_position_names_its_step_in_the_flow_or_in_its_foreach() -> None:
    each = ForEach("each", items=lambda ctx: [], steps=(ActionStep("a", noop), PollStep("b", noop)))
    flow = Flow(name="batch", steps=(ActionStep("first", noop), each))
    batch = Plan(definition=flow, queues=QUEUES, now=NOW, kinds=REGISTRY)
    assert step_of(batch, Position(step_index=1, step="each", kind=TaskKind.FANOUT)) is each
    item = Position(step_index=1, step="b", kind=TaskKind.POLL, scope="each", item=3)
    assert step_of(batch, item).name == "b"


def test_a_plan_without_a_definition_plans_only_what_needs_none() -> None:
    nothing = Plan(definition=None, queues=QUEUES, now=NOW, kinds=REGISTRY)
    with pytest.raises(UnknownFlow, match="the flow's type is not deployed"):
        _ = nothing.flow

"""Sleep steps: a durable timer. The flow holds one Cloud Task, due when it wakes, and no worker.

A sleep's first task (hop 0) fixes its wake time: ``seconds`` after the step started (the
track's ``started_at``, stored when the step began), or what ``until`` returns. The time is
stored on the step's track (``Track.wake_at``) in that task's commit, so a duplicate or a
retried task never moves it. Every later task of the step is a hop: at or after the wake time
the step ends; before it (the 30-day chain, a clock that disagrees with Cloud Tasks', a task
the sweeper re-made) it waits again for what is left, under the next hop's task name.

Cloud Tasks refuses a ``schedule_time`` more than 30 days ahead
(https://cloud.google.com/tasks/docs/reference/rest/v2/projects.locations.queues.tasks#Task,
``scheduleTime``; https://cloud.google.com/tasks/docs/quotas, "Maximum schedule time for a
task: 30 days from current date and time"; CreateTask answers INVALID_ARGUMENT "Schedule time
must be no more than 720h in the future"), and keeps a task at most 31 days (the same page,
"Maximum task retention"), so a hop is at most ``MAX_HOP_S`` (``planner.MAX_SCHEDULE_AHEAD_S``,
29 days: a day inside both, for clocks that disagree). Each hop is
one small write of the flow's document (its position moves to the next hop, whose task is
then the one that must exist): a task is current only at its track's exact position
(``FlowRecord.track_at``), and a hop that wrote nothing would be a stale task when it came.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from relayflow.core.errors import PermanentError
from relayflow.core.flows import Handler, Sleep, Step, StepContext
from relayflow.core.kinds.base import Kind, Wrap
from relayflow.core.planner.forward import advance, fail
from relayflow.core.planner.history import log, new_entry, timeout_of
from relayflow.core.planner.plan import (
    MAX_SCHEDULE_AHEAD_S,
    Plan,
    Retry,
    Waiting,
    schedule,
    step_of,
)
from relayflow.core.planner.saga import begin_failure
from relayflow.core.planner.states import move, with_next
from relayflow.core.position import TaskKind
from relayflow.core.records import FlowRecord
from relayflow.core.state import Status

# The longest single hop of a sleep's wait (see the module docstring).
MAX_HOP_S = MAX_SCHEDULE_AHEAD_S


class Sleeper(Kind):
    step_type: ClassVar[type] = Sleep
    name: ClassVar[str] = "sleep"
    forward: ClassVar[TaskKind] = TaskKind.SLEEP
    tasks: ClassVar[frozenset[TaskKind]] = frozenset({TaskKind.SLEEP})

    def handler(self, step: Step, task: TaskKind) -> Handler | None:
        assert isinstance(step, Sleep)
        return functools.partial(wake_time, step)

    def retries(self, task: TaskKind) -> bool:
        return False  # a hop is the schedule, not a retry of a dependency's call

    def done(self, plan: Plan, record: FlowRecord, output: dict[str, Any]) -> FlowRecord:
        key = record.focus
        assert key is not None and record.step_started_at is not None
        wake = record.tracks[key].wake_at
        if wake is None:  # hop 0: the wake time, fixed once
            step = step_of(plan, record.position)
            assert isinstance(step, Sleep)
            wake = fixed_wake(step, record.step_started_at, output)
            tracks = {**record.tracks, key: record.tracks[key].model_copy(update={"wake_at": wake})}
            record = record.model_copy(update={"tracks": tracks})
        return sleep_on(plan, record, wake)

    def again(self, plan: Plan, record: FlowRecord, outcome: Retry | Waiting) -> FlowRecord:
        """An ``until`` that raised fails the flow: it reads only the input and the outputs,
        so it would raise again (and a sleep has no retry policy to bound a retry)."""
        raised = outcome.error.message if isinstance(outcome, Retry) else "it said not ready"
        message = f"the until of sleep step {record.position.step!r} raised: {raised}"
        return fail(plan, record, PermanentError(message, code="INVALID_WAKE_TIME"))

    def describe(self, step: Step) -> str:
        assert isinstance(step, Sleep)
        if step.seconds is not None:
            return f"sleep {step.seconds:g}s"
        return f"sleep until {getattr(step.until, '__name__', 'a time')}()"

    def wrapped(self, step: Step, wrap: Wrap) -> Step:
        assert isinstance(step, Sleep)
        if step.until is None:
            return step
        return replace(step, until=wrap(step.name, TaskKind.SLEEP, step.until))


def wake_time(step: Sleep, ctx: StepContext) -> dict[str, Any] | None:
    """A sleep task's handler. Hop 0 of an ``until`` sleep: ``{"wake_at": iso}``, what
    ``until`` returned; every other task: nothing (the planner knows the time)."""
    if ctx.poll > 0 or step.until is None:
        return None
    wake = step.until(ctx)
    if not isinstance(wake, datetime) or wake.utcoffset() is None:
        shown = type(wake).__name__ if not isinstance(wake, datetime) else "naive datetime"
        raise PermanentError(
            f"the until of sleep step {step.name!r} returned a {shown}, not a datetime with "
            "a time zone",
            code="INVALID_WAKE_TIME",
        )
    return {"wake_at": wake.astimezone(UTC).isoformat()}


def fixed_wake(step: Sleep, started_at: datetime, output: dict[str, Any]) -> datetime:
    """When a sleep that started at ``started_at`` wakes (its hop 0 handler said ``output``)."""
    if step.seconds is not None:
        return started_at + timedelta(seconds=step.seconds)
    return datetime.fromisoformat(str(output["wake_at"]))


def sleep_on(plan: Plan, record: FlowRecord, wake: datetime) -> FlowRecord:
    """The focused sleep at ``plan.now``: woken (its output), past the flow's deadline
    (TIMED_OUT, as any step), or waiting again for what is left, at most ``MAX_HOP_S`` (and
    no later than the deadline)."""
    assert record.step_started_at is not None
    if plan.now >= wake:
        slept_s = round(max((wake - record.step_started_at).total_seconds(), 0.0), 3)
        output = {"slept_until": wake.isoformat(), "slept_s": slept_s}
        return advance(plan, record, output, seen="woke")
    deadline = record.deadline_at
    if deadline is not None and plan.now >= deadline:
        message = f"the flow's deadline passed while it slept until {wake.isoformat()}"
        err = timeout_of(record, "DEADLINE_EXCEEDED", message)
        return begin_failure(plan, record, Status.TIMED_OUT, err, "deadline passed")
    target = wake if deadline is None else min(wake, deadline)
    delay = min((target - plan.now).total_seconds(), MAX_HOP_S)
    entry = new_entry(plan, record, f"sleeping until {wake.isoformat()}", delay_s=delay)
    pos = record.position
    nxt = pos.model_copy(update={"poll": pos.poll + 1, "attempt": 0, "deferral": 0})
    moved = move(plan, log(plan, record, entry, a_try=False), Status.RUNNING).model_copy(
        update={"position": nxt}
    )
    return with_next(moved, schedule(plan, moved, nxt, delay))

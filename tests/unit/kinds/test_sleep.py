"""relayflow.core.kinds.sleep: the wake time fixed once when the step starts, one task due at
it, the wait chained in hops inside Cloud Tasks' 30 days, a task that comes early waiting for
what is left, the flow's deadline before the wake time, and the step's validation.

Planner level: pure transitions at a clock each test moves explicitly.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from relayflow.core import planner
from relayflow.core.errors import ConfigError, NotReady, PermanentError
from relayflow.core.flows import ActionStep, Flow, Sleep, StepContext
from relayflow.core.kinds import REGISTRY
from relayflow.core.kinds.sleep import MAX_HOP_S, wake_time
from relayflow.core.planner import Completed, Failed, Plan, QueueNames, Waiting
from relayflow.core.position import TaskKind, task_id
from relayflow.core.records import FlowRecord
from relayflow.core.state import Status

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
FLOW_ID = "nap-1"
QUEUES = QueueNames(steps="q-steps", polls="q-polls")
DAY_S = 24 * 3600.0


def noop(ctx: StepContext) -> dict[str, Any]:
    return {}


def flow_of(nap: Sleep) -> Flow:
    return Flow(name="nap", steps=(ActionStep("first", noop), nap, ActionStep("then", noop)))


def plan(flow: Flow, at: datetime = NOW) -> Plan:
    return Plan(definition=flow, queues=QUEUES, now=at, kinds=REGISTRY)


def sleeping(flow: Flow, *, deadline_s: float | None = None) -> FlowRecord:
    """The flow with ``first`` done at NOW: the sleep's hop 0 is due now."""
    record = planner.new_record(
        plan(flow), flow_id=FLOW_ID, input={"at": "2026-03-02T06:00:00+01:00"}, message_id=None,
        deadline_s=deadline_s,
    )  # fmt: skip
    record = planner.after(plan(flow), record, Completed({}))
    assert record.position.kind is TaskKind.SLEEP and record.position.poll == 0
    return record


def hop0(flow: Flow, record: FlowRecord, at: datetime = NOW) -> FlowRecord:
    """Hop 0 ran at ``at``: its handler's output taken into account."""
    nap = flow.named(record.position.step)
    assert isinstance(nap, Sleep)
    ctx = StepContext(
        flow_id=FLOW_ID, flow="nap", step=nap.name, input=record.input, outputs=record.outputs,
        idempotency_key="k", poll=record.position.poll,
    )  # fmt: skip
    return planner.after(plan(flow, at), record, Completed(wake_time(nap, ctx) or {}))


def hop(flow: Flow, record: FlowRecord) -> FlowRecord:
    """The task the record waits for ran when it was due (a hop's handler says nothing)."""
    assert record.next is not None
    return planner.after(plan(flow, record.next.run_at), record, Completed({}))


def test_hop_0_fixes_the_wake_time_and_the_one_task_is_due_at_it() -> None:
    flow = flow_of(Sleep("cool_off", seconds=7200))
    record = hop0(flow, sleeping(flow))
    wake = NOW + timedelta(hours=2)
    assert record.tracks["cool_off"].wake_at == wake
    assert record.position.poll == 1 and record.position.kind is TaskKind.SLEEP
    assert record.next is not None
    assert record.next.run_at == wake == record.next_run_at
    assert record.next.queue == "q-steps"
    assert record.next.task_id == task_id(FLOW_ID, record.position)
    assert record.history[-1].outcome == f"sleeping until {wake.isoformat()}"
    assert record.history[-1].delay_s == 7200.0
    assert record.status is Status.RUNNING


def test_at_the_wake_time_the_step_ends_with_when_it_slept_until_and_the_flow_goes_on() -> None:
    flow = flow_of(Sleep("cool_off", seconds=7200))
    record = hop(flow, hop0(flow, sleeping(flow)))
    wake = NOW + timedelta(hours=2)
    assert record.outputs["cool_off"] == {"slept_until": wake.isoformat(), "slept_s": 7200.0}
    assert record.history[-1].outcome == "woke"
    assert record.position.step == "then"


def test_seconds_count_from_when_the_step_started_not_from_when_its_first_task_ran() -> None:
    flow = flow_of(Sleep("cool_off", seconds=600))
    late = NOW + timedelta(seconds=90)  # hop 0 was delivered late (a backlog)
    record = hop0(flow, sleeping(flow), at=late)
    assert record.tracks["cool_off"].wake_at == NOW + timedelta(seconds=600)
    assert record.next is not None and record.next.run_at == NOW + timedelta(seconds=600)


def test_a_task_that_comes_early_waits_for_what_is_left_and_keeps_the_wake_time() -> None:
    flow = flow_of(Sleep("cool_off", seconds=7200))
    record = hop0(flow, sleeping(flow))
    early = NOW + timedelta(hours=2) - timedelta(seconds=3)  # a clock 3 s ahead of ours
    again = planner.after(plan(flow, early), record, Completed({}))
    assert "cool_off" not in again.outputs
    assert again.tracks["cool_off"].wake_at == NOW + timedelta(hours=2)
    assert again.position.poll == 2
    assert again.next is not None and again.next.run_at == NOW + timedelta(hours=2)
    assert record.next is not None and again.next.task_id != record.next.task_id


def test_a_45_day_sleep_is_chained_in_hops_inside_cloud_tasks_30_days() -> None:
    flow = flow_of(Sleep("long", seconds=45 * DAY_S))
    record = hop0(flow, sleeping(flow))
    runs = []
    while "long" not in record.outputs:
        assert record.next is not None
        assert record.next.run_at - plan(flow).now <= timedelta(days=45)
        runs.append(record.next.run_at)
        record = hop(flow, record)
    assert runs == [NOW + timedelta(seconds=MAX_HOP_S), NOW + timedelta(days=45)]
    assert all(b - a <= timedelta(days=30) for a, b in zip([NOW, *runs], runs, strict=False))
    assert MAX_HOP_S < 30 * DAY_S
    assert record.outputs["long"]["slept_s"] == 45 * DAY_S


def test_until_fixes_the_time_it_returns_once_in_utc() -> None:
    def opens(ctx: StepContext) -> datetime:
        return datetime.fromisoformat(ctx.input["at"])

    flow = flow_of(Sleep("until_open", until=opens))
    record = hop0(flow, sleeping(flow))
    wake = datetime(2026, 3, 2, 5, 0, tzinfo=UTC)
    assert record.tracks["until_open"].wake_at == wake
    assert record.next is not None and record.next.run_at == wake


def test_until_in_the_past_wakes_at_once_with_no_task() -> None:
    flow = flow_of(Sleep("until_open", until=lambda ctx: NOW - timedelta(days=1)))
    record = hop0(flow, sleeping(flow))
    assert record.outputs["until_open"]["slept_s"] == 0.0
    assert record.position.step == "then"


def test_a_deadline_before_the_wake_time_times_the_flow_out_at_the_deadline() -> None:
    flow = flow_of(Sleep("cool_off", seconds=7200))
    record = hop0(flow, sleeping(flow, deadline_s=1800))
    assert record.next is not None and record.next.run_at == NOW + timedelta(seconds=1800)
    ended = hop(flow, record)
    assert ended.status is Status.TIMED_OUT
    assert ended.result is not None and ended.result.code == "DEADLINE_EXCEEDED"
    assert "slept until" in ended.result.message


@pytest.mark.parametrize(
    "returned", [None, "2026-03-02T06:00:00Z", datetime(2026, 3, 2, 6, 0)], ids=str
)
def test_until_that_returns_no_aware_datetime_fails_the_flow_naming_the_step(
    returned: Any,
) -> None:
    nap = Sleep("until_open", until=lambda ctx: returned)
    ctx = StepContext(
        flow_id="f", flow="nap", step=nap.name, input={}, outputs={}, idempotency_key="k"
    )
    with pytest.raises(PermanentError, match=r"'until_open'.*not a datetime with a time zone"):
        wake_time(nap, ctx)


def test_until_that_raises_fails_the_flow_rather_than_retrying() -> None:
    flow = flow_of(Sleep("until_open", until=lambda ctx: NOW))
    record = sleeping(flow)
    ended = planner.after(plan(flow), record, Waiting(NotReady("no")))
    assert ended.status is Status.FAILED
    assert ended.result is not None and ended.result.code == "INVALID_WAKE_TIME"
    failed = planner.after(plan(flow), sleeping(flow), Failed(PermanentError("x", code="C")))
    assert failed.status is Status.FAILED


@pytest.mark.parametrize("seconds", [0, -1, math.inf, math.nan, True, 1e12, "60"], ids=str)
def test_seconds_must_be_a_finite_number_above_zero(seconds: Any) -> None:
    with pytest.raises(ConfigError, match="sleep step 'nap': seconds must be"):
        Sleep("nap", seconds=seconds)


def test_a_sleep_takes_seconds_or_until_one_of_them() -> None:
    with pytest.raises(ConfigError, match="give seconds= or until="):
        Sleep("nap")
    with pytest.raises(ConfigError, match="give seconds= or until="):
        Sleep("nap", seconds=5, until=lambda ctx: NOW)
    with pytest.raises(ConfigError, match="until must be a function"):
        Sleep("nap", until=NOW)  # type: ignore[arg-type]


def test_the_graph_and_the_position_name_it() -> None:
    assert REGISTRY.of(Sleep("nap", seconds=7200)).describe(Sleep("nap", seconds=7200)) == (
        "sleep 7200s"
    )

    def opening_time(ctx: StepContext) -> datetime:
        return NOW

    assert REGISTRY.of(Sleep("nap", until=opening_time)).describe(
        Sleep("nap", until=opening_time)
    ) == ("sleep until opening_time()")
    flow = flow_of(Sleep("cool_off", seconds=7200))
    assert hop0(flow, sleeping(flow)).position.label() == "cool_off sleep hop 1"

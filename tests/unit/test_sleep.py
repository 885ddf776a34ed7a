"""Sleep steps through relayflow.testing's time-skipping harness: a two-hour sleep in
milliseconds, a 45-day sleep chained in hops, sleeps in a branch, beside a parallel step and in
a ForEach's items, duplicates that change nothing, cancel and operator retry during a sleep,
a deadline before the wake time, a lost task the sweeper re-makes, and a tenant slot held while
a flow sleeps."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any

import pytest

from relayflow import ActionStep, Flow, IfStep, Sleep, StepContext, TenantPolicy, Tenants
from relayflow.core.flows import ForEach
from relayflow.core.kinds.sleep import MAX_HOP_S
from relayflow.core.position import TaskKind
from relayflow.core.state import Status
from relayflow.testing import START, Harness

DAY_S = 24 * 3600.0
sent: list[tuple[str, datetime]] = []


def remind(ctx: StepContext) -> dict[str, Any]:
    sent.append((ctx.flow_id, ctx.clock()))
    return {"sent": True}


def noop(ctx: StepContext) -> dict[str, Any]:
    return {}


@pytest.fixture(autouse=True)
def _forget_reminders() -> None:
    sent.clear()


def reminder(seconds: float = 7200) -> Flow:
    return Flow(
        name="reminder",
        steps=(
            ActionStep("order", noop),
            Sleep("cool_off", seconds=seconds),
            ActionStep("remind", remind),
        ),
    )


def test_a_two_hour_sleep_is_skipped_in_virtual_time_in_milliseconds() -> None:
    h = Harness(reminder())
    flow_id = h.start("reminder", flow_id="r-1")
    began = time.perf_counter()
    record = h.run(flow_id)
    took_s = time.perf_counter() - began
    assert record is not None and record.status is Status.SUCCEEDED
    wake = START + timedelta(hours=2)
    assert record.outputs["cool_off"] == {"slept_until": wake.isoformat(), "slept_s": 7200.0}
    assert sent == [("r-1", wake)]  # the reminder went out when the sleep woke, not before
    assert took_s < 1.0
    assert h.path(flow_id) == [
        "order action #0: succeeded",
        f"cool_off sleep hop 0: sleeping until {wake.isoformat()}",
        "cool_off sleep hop 1: woke",
        "remind action #0: succeeded",
    ]


def test_a_sleeping_flow_holds_one_task_due_at_its_wake_time() -> None:
    h = Harness(reminder())
    flow_id = h.start("reminder", flow_id="r-1")
    h.run_until(START + timedelta(hours=1))
    record = h.flow(flow_id)
    assert record.status is Status.RUNNING
    assert h.wake_at(flow_id, "cool_off") == START + timedelta(hours=2)
    task = h.queue.only(flow_id)
    assert task.next.position.kind is TaskKind.SLEEP
    assert task.next.run_at == START + timedelta(hours=2) == record.next_run_at
    assert sent == []


def test_a_45_day_sleep_is_chained_and_wakes_on_time() -> None:
    h = Harness(reminder(seconds=45 * DAY_S))
    flow_id = h.start("reminder", flow_id="r-45")
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED
    tasks = h.sleep_tasks(flow_id, "cool_off")
    # hop 0 fixes the wake time; hop 1 is as far as Cloud Tasks schedules; hop 2 wakes it
    assert [t.position.poll for t in tasks] == [0, 1, 2]
    assert [t.run_at for t in tasks] == [
        START,
        START + timedelta(seconds=MAX_HOP_S),
        START + timedelta(days=45),
    ]
    made_at = [START, START, START + timedelta(seconds=MAX_HOP_S)]  # each made by the one before
    assert all(t.run_at - at < timedelta(days=30) for t, at in zip(tasks, made_at, strict=True))
    assert sent == [("r-45", START + timedelta(days=45))]
    assert record.outputs["cool_off"]["slept_s"] == 45 * DAY_S


def test_duplicate_deliveries_change_nothing() -> None:
    h = Harness(reminder(seconds=45 * DAY_S), duplicate_deliveries=True)
    flow_id = h.start("reminder", flow_id="r-dup")
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED
    assert [t.position.poll for t in h.sleep_tasks(flow_id, "cool_off")] == [0, 1, 2]
    assert sent == [("r-dup", START + timedelta(days=45))]


def test_until_sleeps_to_a_time_read_from_the_input() -> None:
    def opens(ctx: StepContext) -> datetime:
        return datetime.fromisoformat(ctx.input["opens_at"])

    flow = Flow(
        name="store",
        steps=(Sleep("until_open", until=opens), ActionStep("remind", remind)),
    )
    h = Harness(flow)
    flow_id = h.start("store", {"opens_at": "2030-01-02T09:00:00+01:00"}, flow_id="s-1")
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED
    assert sent == [("s-1", datetime.fromisoformat("2030-01-02T08:00:00+00:00"))]
    assert len(h.calls_of("until_open")) == 1  # once, on its first task: never again


def test_a_sleep_in_a_branch_and_one_beside_a_parallel_step() -> None:
    flow = Flow(
        name="branchy",
        steps=(
            IfStep("pick", lambda ctx: ctx.input["wait"], then=("nap",), otherwise=("skip",)),
            Sleep("nap", seconds=600),
            ActionStep("skip", noop),
            ActionStep("meanwhile", remind, after=("pick",)),
            ActionStep("end", remind, after=("nap", "skip", "meanwhile")),
        ),
    )
    h = Harness(flow)
    flow_id = h.start("branchy", {"wait": True}, flow_id="b-1")
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED
    assert record.skipped == ["skip"]
    # the parallel step did not wait for the sleep; the step after both did
    assert sent == [("b-1", START), ("b-1", START + timedelta(seconds=600))]
    other = h.start("branchy", {"wait": False}, flow_id="b-2")
    done = h.run(other)
    assert done is not None and "nap" in done.skipped and "nap" not in done.outputs


def test_a_sleep_in_each_foreach_item() -> None:
    flow = Flow(
        name="drip",
        steps=(
            ForEach(
                "each",
                items=lambda ctx: ctx.input["users"],
                steps=(Sleep("wait", seconds=3600), ActionStep("send", remind)),
                concurrency=2,
            ),
        ),
    )
    h = Harness(flow)
    flow_id = h.start("drip", {"users": ["a", "b", "c"]}, flow_id="d-1")
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED
    assert record.outputs["each"]["items"] == [{"sent": True}] * 3
    # two lanes: items 0 and 1 sleep side by side, item 2 after item 0
    assert sorted(at for _, at in sent) == [
        START + timedelta(hours=1),
        START + timedelta(hours=1),
        START + timedelta(hours=2),
    ]


def test_cancel_during_a_sleep_ends_it_and_its_task_then_does_nothing() -> None:
    h = Harness(reminder())
    flow_id = h.start("reminder", flow_id="r-c")
    h.run_until(START + timedelta(minutes=30))
    cancelled = h.cancel(flow_id)
    assert cancelled.status is Status.CANCELLED
    h.run()  # the sleep's task comes at its wake time: stale
    assert h.flow(flow_id).status is Status.CANCELLED
    assert sent == []


def test_an_operator_retry_after_a_cancelled_sleep_sleeps_the_whole_time_again() -> None:
    h = Harness(reminder())
    flow_id = h.start("reminder", flow_id="r-r")
    h.run_until(START + timedelta(minutes=30))
    h.cancel(flow_id)
    h.run()
    retried_at = h.now
    h.retry(flow_id)
    h.run_until(retried_at)  # its first task fixes the new wake time
    assert h.wake_at(flow_id, "cool_off") == retried_at + timedelta(hours=2)
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED
    assert sent == [("r-r", retried_at + timedelta(hours=2))]


def test_a_deadline_before_the_wake_time_times_the_flow_out_at_its_deadline() -> None:
    h = Harness(reminder())
    flow_id = h.start("reminder", flow_id="r-d", deadline_s=1800)
    record = h.run(flow_id)
    assert record is not None and record.status is Status.TIMED_OUT
    assert record.result is not None and record.result.code == "DEADLINE_EXCEEDED"
    assert record.finished_at == START + timedelta(seconds=1800)
    assert sent == []


def test_a_lost_sleep_task_is_made_again_by_the_sweeper() -> None:
    h = Harness(reminder())
    flow_id = h.start("reminder", flow_id="r-l")
    h.run_until(START + timedelta(minutes=1))
    h.queue.lose(h.queue.only(flow_id).next.task_id)
    h.advance_to(START + timedelta(hours=2, minutes=5))
    assert h.sweep().rescued == 1
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED
    assert record.outputs["cool_off"]["slept_until"] == (START + timedelta(hours=2)).isoformat()


def test_a_sleeping_flow_keeps_its_tenant_slot() -> None:
    tenants = Tenants(tenants={"acme": TenantPolicy(max_running=1)})
    h = Harness(reminder(), tenants=tenants)
    first = h.start("reminder", flow_id="t-1", tenant="acme")
    h.run_until(START + timedelta(minutes=1))
    second = h.start("reminder", flow_id="t-2", tenant="acme")
    h.run_until(START + timedelta(minutes=2))
    assert h.flow(second).admission == "waiting"  # the sleeper holds the one slot
    h.run()
    assert h.flow(first).status is Status.SUCCEEDED
    assert h.flow(second).status is Status.SUCCEEDED
    assert [flow for flow, _ in sent] == ["t-1", "t-2"]

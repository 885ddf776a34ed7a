"""Schedules through the time-skipping harness, in milliseconds: ticks fire as time skips
(across the 2026 DST changes in Europe/Berlin), a tick run twice or two runs at once start one
flow, each catch-up policy after an outage, each overlap policy, pause, resume and trigger."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from relayflow import ActionStep, CatchUp, Flow, Overlap, Registry, Schedule, Sleep, StepContext
from relayflow.core.errors import UnknownSchedule
from relayflow.core.schedule_state import ScheduleState
from relayflow.core.scheduler import Scheduler
from relayflow.core.state import Status
from relayflow.testing import Harness
from relayflow.testing.memory import MemoryScheduleStates

HOUR_S = 3600.0
DAY_S = 24 * HOUR_S


def echo(ctx: StepContext) -> dict[str, Any]:
    return {"day": ctx.input["day"]}


QUICK = Flow(name="reconcile", steps=(ActionStep("work", echo),))
# Runs two hours: an hourly schedule's next tick finds it still running.
SLOW = Flow(name="reconcile", steps=(Sleep("long", seconds=2 * HOUR_S), ActionStep("work", echo)))


def by_day(tick: datetime) -> dict[str, Any]:
    return {"day": tick.strftime("%Y-%m-%d %H:%M %Z")}


def harness(flow: Flow = QUICK, *, at: datetime, **kw: Any) -> Harness:
    kw.setdefault("cron", "0 2 * * *")
    schedule = Schedule("nightly", flow="reconcile", input=by_day, **kw)
    return Harness(Registry((flow,), schedules=(schedule,)), start=at)


def test_ticks_fire_as_time_skips_across_the_spring_forward_gap() -> None:
    h = harness(cron="30 2 * * *", timezone="Europe/Berlin", at=datetime(2026, 3, 27, tzinfo=UTC))
    h.run_until(h.now + timedelta(days=4))
    assert h.started_by("nightly") == [
        "sched-nightly-20260327T0130Z",
        "sched-nightly-20260328T0130Z",
        "sched-nightly-20260329T0100Z",  # 02:30 did not exist: 03:00 CEST
        "sched-nightly-20260330T0030Z",
    ]
    gap = h.run("sched-nightly-20260329T0100Z")
    assert gap is not None and gap.input == {"day": "2026-03-29 03:00 CEST"}


def test_ticks_fire_once_in_the_fall_back_repeat() -> None:
    h = harness(cron="30 2 * * *", timezone="Europe/Berlin", at=datetime(2026, 10, 24, tzinfo=UTC))
    h.run_until(h.now + timedelta(days=3))
    assert h.started_by("nightly") == [
        "sched-nightly-20261024T0030Z",
        "sched-nightly-20261025T0030Z",  # the first 02:30 (CEST); not the second (CET)
        "sched-nightly-20261026T0130Z",
    ]


def test_a_tick_run_twice_starts_one_flow() -> None:
    h = harness(at=datetime(2026, 1, 1, 1, 59, tzinfo=UTC))
    h.advance(60)
    again = h.scheduler.tick(h.now)  # the job delivered again
    assert h.started_by("nightly") == ["sched-nightly-20260101T0200Z"]
    assert again.started == [] and again.duplicate == 0  # nothing due: recorded already
    h.schedule_states.states.clear()  # even if the record were lost, the start is a duplicate
    assert h.tick().duplicate == 1
    assert h.started_by("nightly") == ["sched-nightly-20260101T0200Z"]


class Racing(MemoryScheduleStates):
    """Lets another tick run finish between this run's read and its write."""

    def __init__(self, inner: MemoryScheduleStates) -> None:
        super().__init__()
        self.inner = inner
        self.other: Scheduler | None = None

    def read(self, name: str) -> ScheduleState:
        return self.inner.read(name)

    def write(self, state: ScheduleState) -> bool:
        if self.other is not None:
            other, self.other = self.other, None
            other.tick()
        return self.inner.write(state)

    def read_all(self) -> list[ScheduleState]:
        return self.inner.read_all()


def test_two_tick_runs_at_once_start_the_flow_once_and_record_it_once() -> None:
    h = harness(at=datetime(2026, 1, 1, 2, 0, 30, tzinfo=UTC))
    racing = Racing(h.schedule_states)
    first = Scheduler(h.engine, racing, h.scheduler.schedules, h.clock)
    racing.other = h.scheduler
    report = first.tick()
    assert h.started_by("nightly") == ["sched-nightly-20260101T0200Z"]
    assert report.started == [] and report.errors == 0  # the other run recorded the start
    state = h.schedule("nightly")
    assert [r.flow_id for r in state.runs] == ["sched-nightly-20260101T0200Z"]
    assert h.schedule_states.conflicts == 1


@pytest.mark.parametrize(
    ("catch_up", "started"),
    [
        (CatchUp.none(), []),
        (CatchUp.latest(), ["20260105T0200Z"]),
        (CatchUp.all(window_s=2 * DAY_S + HOUR_S), ["20260104T0200Z", "20260105T0200Z"]),
    ],
)
def test_missed_ticks_after_an_outage_under_each_catch_up_policy(
    catch_up: CatchUp, started: list[str]
) -> None:
    h = harness(at=datetime(2026, 1, 1, 3, tzinfo=UTC), catch_up=catch_up, overlap=Overlap.ALLOW)
    h.tick()  # handled up to Jan 1 03:00
    h.advance(4 * DAY_S, ticks=False)  # the tick job is down for four nights
    report = h.tick()
    assert h.started_by("nightly") == [f"sched-nightly-{s}" for s in started]
    assert report.missed == 4 - len(started)
    assert h.schedule("nightly").missed == 4 - len(started)


def test_overlap_skip_records_the_running_previous_run() -> None:
    h = harness(SLOW, cron="0 * * * *", at=datetime(2026, 1, 1, 0, 30, tzinfo=UTC))
    h.run_until(h.now + timedelta(hours=2))  # 01:00 starts; at 02:00 it sleeps until 03:00
    assert h.started_by("nightly") == ["sched-nightly-20260101T0100Z"]
    skipped = h.schedule("nightly").runs[0]
    assert skipped.outcome == "skipped"
    assert skipped.note == "skipped, previous run sched-nightly-20260101T0100Z still running"


def test_overlap_allow_starts_beside_the_running_previous_run() -> None:
    h = harness(
        SLOW, cron="0 * * * *", overlap=Overlap.ALLOW, at=datetime(2026, 1, 1, 0, 30, tzinfo=UTC)
    )
    h.run_until(h.now + timedelta(hours=2))
    ids = h.started_by("nightly")
    assert len(ids) == 2 and all(h.flow(i).status is Status.RUNNING for i in ids)


def test_overlap_cancel_cancels_the_previous_run_naming_the_schedule() -> None:
    h = harness(
        SLOW, cron="0 * * * *", overlap=Overlap.CANCEL, at=datetime(2026, 1, 1, 0, 30, tzinfo=UTC)
    )
    h.run_until(h.now + timedelta(hours=2))
    first, second = h.started_by("nightly")
    cancelled = h.flow(first)
    assert cancelled.status is Status.CANCELLED
    assert "schedule nightly: superseded by its tick 2026-01-01T02:00Z" in str(cancelled)
    assert h.flow(second).status is Status.RUNNING


def test_a_paused_schedule_starts_nothing_and_resumes_without_catching_up() -> None:
    h = harness(at=datetime(2026, 1, 1, 3, tzinfo=UTC))
    h.scheduler.pause("nightly", by="ops@example.com", reason="migration")
    h.advance(3 * DAY_S)
    assert h.started_by("nightly") == []
    assert h.schedule("nightly").paused and h.schedule("nightly").reason == "migration"
    h.scheduler.resume("nightly", by="ops@example.com")
    h.advance(DAY_S)
    assert h.started_by("nightly") == ["sched-nightly-20260105T0200Z"]


def test_a_trigger_starts_a_manual_run_that_counts_for_overlap() -> None:
    h = harness(SLOW, cron="0 * * * *", at=datetime(2026, 1, 1, 0, 30, tzinfo=UTC))
    run = h.scheduler.trigger("nightly", by="ops@example.com", reason="catch up by hand")
    assert run.flow_id == "sched-nightly-manual-20260101T003000Z" and run.manual
    assert run.outcome == "started"
    h.run_until(h.now + timedelta(hours=1))  # 01:00: the manual run still sleeps
    assert h.schedule("nightly").runs[0].outcome == "skipped"
    named = h.scheduler.trigger("nightly", flow_id="my-own-id")
    assert named.flow_id == "my-own-id" and h.flow("my-own-id").status is Status.PENDING


def test_operating_an_unknown_schedule_names_those_that_exist() -> None:
    h = harness(at=datetime(2026, 1, 1, tzinfo=UTC))
    with pytest.raises(UnknownSchedule, match=r"unknown schedule 'weekly' \(deployed: nightly\)"):
        h.scheduler.pause("weekly")


def test_views_show_next_ticks_in_both_zones_and_last_runs_with_status() -> None:
    h = harness(timezone="Europe/Berlin", at=datetime(2026, 1, 1, tzinfo=UTC))
    h.run_until(datetime(2026, 1, 2, 12, tzinfo=UTC))
    (view,) = h.scheduler.views()
    assert view["next_ticks"][0] == {
        "local": "2026-01-03T02:00:00+01:00",
        "utc": "2026-01-03T01:00:00+00:00",
    }
    assert view["runs"][0]["flow_id"] == "sched-nightly-20260102T0100Z"
    assert view["runs"][0]["status"] == "SUCCEEDED"
    assert (view["paused"], view["overlap"], view["catch_up"]) == (False, "skip", "latest")


def test_a_tick_whose_input_function_raises_starts_nothing_and_says_why() -> None:
    h = harness(at=datetime(2026, 1, 1, 1, 59, tzinfo=UTC))
    schedule = replace(h.scheduler.schedule("nightly"), input=lambda tick: 1 / 0)
    h.deploy(Registry((QUICK,), schedules=(schedule,)))
    h.advance(60)
    assert h.started_by("nightly") == []
    assert "ZeroDivisionError" in h.schedule("nightly").runs[0].note
    assert timedelta(0) == h.now - datetime(2026, 1, 1, 2, 0, tzinfo=UTC)

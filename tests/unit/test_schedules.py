"""Schedules' pure logic: the registry's checks, flow ids, next ticks across DST in
Europe/Berlin (the 2026-03-29 gap and the 2026-10-25 repeat), and the due ticks of a tick run
after an outage under each catch-up policy (an outage longer than the window included)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from relayflow import ActionStep, CatchUp, ConfigError, Flow, Registry, Schedule
from relayflow.core.schedules import (
    MAX_TICKS_PER_RUN,
    ON_TIME_S,
    due,
    flow_id_of,
    latest_tick,
    manual_id_of,
    next_ticks,
)

BERLIN = "Europe/Berlin"


def noop(ctx: Any) -> dict[str, Any]:
    return {}


FLOW = Flow(name="reconcile", steps=(ActionStep("work", noop),))


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def nightly(**kw: Any) -> Schedule:
    return Schedule("nightly", flow="reconcile", cron=kw.pop("cron", "0 2 * * *"), **kw)


@pytest.mark.parametrize(
    ("schedule", "problem"),
    [
        (nightly(cron="61 2 * * *"), "schedule 'nightly': invalid cron expression '61 2 * * *'"),
        (nightly(cron="every night"), "schedule 'nightly': invalid cron expression"),
        (nightly(timezone="Europe/Atlantis"), "unknown time zone 'Europe/Atlantis'"),
        (nightly(timezone="../etc/passwd"), "unknown time zone"),
        (Schedule("n", flow="nope", cron="* * * * *"), "flow 'nope', which is not registered"),
        (Schedule("Bad Name", flow="reconcile", cron="* * * * *"), "a name must match"),
        (nightly(input={"at": object()}), "schedule 'nightly': input is not a JSON object"),
    ],
)
def test_the_registry_build_refuses_a_bad_schedule_naming_it(
    schedule: Schedule, problem: str
) -> None:
    with pytest.raises(ConfigError, match="schedule") as raised:
        Registry((FLOW,), schedules=(schedule,))
    assert problem in str(raised.value)


def test_the_registry_build_refuses_what_is_no_schedule() -> None:
    with pytest.raises(ConfigError, match="a registry's schedules are Schedule objects"):
        Registry((FLOW,), schedules=("nightly",))  # type: ignore[arg-type]


def test_the_registry_build_refuses_a_duplicate_schedule_name() -> None:
    with pytest.raises(ConfigError, match="schedule 'nightly' is declared twice"):
        Registry((FLOW,), schedules=(nightly(), nightly(cron="0 3 * * *")))


def test_the_registry_holds_its_schedules_by_name() -> None:
    registry = Registry((FLOW,), schedules=(nightly(), Schedule("a", "reconcile", "0 * * * *")))
    assert [s.name for s in registry.schedules] == ["a", "nightly"]


def test_a_catch_up_window_must_be_positive_and_bounded() -> None:
    with pytest.raises(ConfigError, match="window_s"):
        CatchUp.all(window_s=0)
    with pytest.raises(ConfigError, match="window_s"):
        CatchUp.all(window_s=400 * 86400)


def test_flow_ids_derive_from_the_schedule_and_the_tick_in_utc() -> None:
    tick = datetime(2026, 12, 3, 2, 0, tzinfo=nightly(timezone=BERLIN).zone)
    assert flow_id_of("nightly", tick) == "sched-nightly-20261203T0100Z"
    assert manual_id_of("nightly", utc(2026, 12, 3, 1, 2, 3)) == (
        "sched-nightly-manual-20261203T010203Z"
    )


def test_a_tick_in_the_spring_forward_gap_runs_once_after_the_gap() -> None:
    # 2026-03-29 in Berlin: 02:00 CET jumps to 03:00 CEST, so 02:30 does not exist.
    schedule = nightly(cron="30 2 * * *", timezone=BERLIN)
    ticks = next_ticks(schedule, utc(2026, 3, 27, 12), 4)
    local = [t.astimezone(schedule.zone).strftime("%m-%d %H:%M %Z") for t in ticks]
    assert local == ["03-28 02:30 CET", "03-29 03:00 CEST", "03-30 02:30 CEST", "03-31 02:30 CEST"]
    assert ticks[1] == utc(2026, 3, 29, 1, 0)


def test_a_fixed_hour_tick_in_the_fall_back_repeat_runs_once_at_its_first_occurrence() -> None:
    # 2026-10-25 in Berlin: 03:00 CEST falls back to 02:00 CET, so 02:30 happens twice.
    schedule = nightly(cron="30 2 * * *", timezone=BERLIN)
    ticks = next_ticks(schedule, utc(2026, 10, 24, 12), 3)
    assert ticks == [utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30), utc(2026, 10, 27, 1, 30)]
    assert len({flow_id_of("nightly", t) for t in ticks}) == 3


def test_a_wildcard_hour_expression_runs_in_both_occurrences_of_the_repeated_hour() -> None:
    schedule = nightly(cron="*/30 * * * *", timezone=BERLIN)
    ticks = next_ticks(schedule, utc(2026, 10, 24, 23, 50), 4)
    # 02:00 and 02:30 CEST, then 02:00 and 02:30 CET: four instants, four ids.
    assert ticks == [utc(2026, 10, 25, h, m) for h in (0, 1) for m in (0, 30)]


def test_the_latest_tick_is_at_or_before_now() -> None:
    schedule = nightly()
    assert latest_tick(schedule, utc(2026, 1, 5, 2, 0)) == utc(2026, 1, 5, 2, 0)
    assert latest_tick(schedule, utc(2026, 1, 5, 1, 59)) == utc(2026, 1, 4, 2, 0)


def test_an_on_time_tick_is_due_once_and_the_run_records_now() -> None:
    now = utc(2026, 1, 5, 2, 0, 40)
    plan = due(nightly(), utc(2026, 1, 5, 1, 59, 40), now)
    assert plan.ticks == (utc(2026, 1, 5, 2, 0),)
    assert (plan.missed, plan.handled_to) == (0, now)
    assert due(nightly(), now, now + timedelta(seconds=60)).ticks == ()


def test_a_new_schedule_starts_at_its_next_tick_without_a_backfill() -> None:
    plan = due(nightly(), None, utc(2026, 1, 5, 12, 0))
    assert plan.ticks == ()


OUTAGE_FROM = utc(2026, 1, 1, 0, 0)  # the last tick run before the outage
BACK_AT = utc(2026, 1, 8, 12, 0)  # the ticks of 8 nights missed: Jan 1 ... Jan 8, 02:00


def test_catch_up_none_drops_every_missed_tick() -> None:
    plan = due(nightly(catch_up=CatchUp.none()), OUTAGE_FROM, BACK_AT)
    assert (plan.ticks, plan.missed, plan.handled_to) == ((), 8, BACK_AT)


def test_catch_up_latest_runs_the_newest_missed_tick_once() -> None:
    plan = due(nightly(catch_up=CatchUp.latest()), OUTAGE_FROM, BACK_AT)
    assert (plan.ticks, plan.missed) == ((utc(2026, 1, 8, 2, 0),), 7)


def test_catch_up_latest_is_the_default_and_honoured_after_a_year_long_outage() -> None:
    # Not one start per missed tick (dbos-transact-py#803): one, and quickly.
    back = OUTAGE_FROM + timedelta(days=365, hours=5)
    plan = due(nightly(), OUTAGE_FROM, back)
    assert (plan.ticks, plan.missed) == ((utc(2027, 1, 1, 2, 0),), 365)
    # A minutely schedule: the ticks still on time start; what is older is superseded.
    plan = due(nightly(cron="* * * * *"), OUTAGE_FROM, back)
    assert plan.ticks == tuple(back - timedelta(minutes=m) for m in (2, 1, 0))


def test_catch_up_all_runs_the_missed_ticks_within_the_window_oldest_first() -> None:
    plan = due(nightly(catch_up=CatchUp.all(window_s=3 * 86400)), OUTAGE_FROM, BACK_AT)
    # The window reaches back to Jan 5 12:00: Jan 6, 7 and 8 are caught up, Jan 1-5 dropped.
    assert plan.ticks == tuple(utc(2026, 1, d, 2, 0) for d in (6, 7, 8))
    assert plan.missed == 5


def test_catch_up_all_after_an_outage_longer_than_the_window_starts_only_the_window() -> None:
    schedule = nightly(cron="0 * * * *", catch_up=CatchUp.all(window_s=2 * 3600))
    back = OUTAGE_FROM + timedelta(days=30, minutes=30)
    plan = due(schedule, OUTAGE_FROM, back)
    assert plan.ticks == (back - timedelta(minutes=90), back - timedelta(minutes=30))
    assert plan.handled_to == back


def test_catch_up_all_goes_on_next_run_past_the_per_run_cap() -> None:
    schedule = nightly(cron="* * * * *", catch_up=CatchUp.all(window_s=3600))
    back = OUTAGE_FROM + timedelta(hours=5)
    first = due(schedule, OUTAGE_FROM, back)
    assert len(first.ticks) == MAX_TICKS_PER_RUN
    assert first.ticks[0] == back - timedelta(seconds=3600 - 60)
    assert first.handled_to == first.ticks[-1]
    second = due(schedule, first.handled_to, back)
    assert second.ticks[0] == first.ticks[-1] + timedelta(minutes=1)


def test_a_tick_within_the_on_time_margin_is_not_missed() -> None:
    late = utc(2026, 1, 5, 2, 0) + timedelta(seconds=ON_TIME_S - 1)
    plan = due(nightly(catch_up=CatchUp.none()), utc(2026, 1, 5, 1, 0), late)
    assert plan.ticks == (utc(2026, 1, 5, 2, 0),)

"""Schedules: a flow started on a cron expression, declared in the app next to its flows.

``Schedule("nightly", flow="reconcile", cron="0 2 * * *", timezone="Europe/Berlin")`` says
when; this module says which ticks are due between the last one handled and now (the catch-up
policy applied), what each tick's flow id is, and what the next ticks are. It is pure: the
scheduler (``core.scheduler``) reads and writes the state, starts and cancels the flows.

Cron expressions are parsed and iterated by cronsim, whose DST handling is Debian cron's: a
tick in a spring-forward gap (02:30 on a day 02:00-03:00 does not exist) runs once, at the
first minute after the gap; a tick that names a fixed hour in a fall-back repeat (02:30 on a
day 02:00-03:00 happens twice) runs once, at its first occurrence; an expression whose hour
field is a wildcard or a step (``*/30 * * * *``) runs in both occurrences, as the hour is
lived twice. Every tick is a distinct instant, so each has its own flow id (in UTC).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from relayflow.core.errors import ConfigError

# A schedule's name is part of its flows' ids (``sched-{name}-{tick}``, at most 100 chars).
SCHEDULE_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
FLOW_ID_PREFIX = "sched"
# A tick this old when the tick job gets to it is still on time: Cloud Scheduler runs the job
# every minute, and one run may be late (its attempt deadline, a cold start).
ON_TIME_S = 180.0
# What one tick run starts at most: the oldest due first; the next run goes on from there.
MAX_TICKS_PER_RUN = 50
# The longest catch-up window: a year of ticks at most (an ``all`` window is walked tick by tick).
MAX_WINDOW_S = 366 * 24 * 3600.0
# Missed ticks are counted for the report up to this many (a long outage of a minutely cron).
MAX_COUNTED = 1000

TickInput = Mapping[str, Any] | Callable[[datetime], Mapping[str, Any]]


class Overlap(StrEnum):
    """What a tick does while the schedule's previous run is still running."""

    SKIP = "skip"  # start nothing; record "skipped, previous run X still running"
    ALLOW = "allow"  # start it anyway: runs overlap
    CANCEL = "cancel"  # cancel the previous run (the reason names the schedule), then start


class CatchUpMode(StrEnum):
    NONE = "none"
    LATEST = "latest"
    ALL = "all"


@dataclass(frozen=True)
class CatchUp:
    """What happens to ticks missed while nothing ran them (an outage, a paused job): a tick
    older than ``ON_TIME_S`` when its run comes is missed.

    ``CatchUp.none()``: missed ticks are dropped; ``CatchUp.latest()`` (the default): the
    newest missed tick runs once, however long the outage, unless an on-time tick supersedes
    it; ``CatchUp.all(window_s=…)``: every missed tick of the last ``window_s`` runs, oldest
    first, at most MAX_TICKS_PER_RUN a minute; older ones are dropped.
    """

    mode: CatchUpMode = CatchUpMode.LATEST
    window_s: float = 0.0

    @classmethod
    def none(cls) -> CatchUp:
        return cls(CatchUpMode.NONE)

    @classmethod
    def latest(cls) -> CatchUp:
        return cls(CatchUpMode.LATEST)

    @classmethod
    def all(cls, *, window_s: float) -> CatchUp:
        if not 0 < window_s <= MAX_WINDOW_S:
            raise ConfigError(f"CatchUp.all: window_s must be in (0, {MAX_WINDOW_S:g}]")
        return cls(CatchUpMode.ALL, float(window_s))


@dataclass(frozen=True)
class Schedule:
    """A flow started at each tick of ``cron`` in ``timezone``, with ``input`` (a mapping, or a
    function of the tick time in that zone returning one: it must give the same input for the
    same tick, since a tick run twice starts its flow by the same id)."""

    name: str
    flow: str
    cron: str
    timezone: str = "UTC"
    input: TickInput = field(default_factory=dict)
    overlap: Overlap = Overlap.SKIP
    catch_up: CatchUp = field(default_factory=CatchUp.latest)
    description: str = ""

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def input_at(self, tick: datetime) -> dict[str, Any]:
        """The flow input for ``tick`` (as a time in the schedule's zone)."""
        made = self.input(tick.astimezone(self.zone)) if callable(self.input) else self.input
        return dict(made)


def check(schedule: Schedule, flows: Container[str]) -> None:
    """ConfigError naming ``schedule`` and its problem: a bad name, cron expression, time
    zone or policy, or a flow that ``flows`` does not hold."""
    if not isinstance(schedule, Schedule):
        raise ConfigError(f"a registry's schedules are Schedule objects, got {type(schedule)}")
    where = f"schedule {schedule.name!r}"
    if not re.fullmatch(SCHEDULE_NAME_PATTERN, schedule.name):
        raise ConfigError(f"{where}: a name must match {SCHEDULE_NAME_PATTERN}")
    try:
        ZoneInfo(schedule.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"{where}: unknown time zone {schedule.timezone!r}") from None
    try:
        CronSim(schedule.cron, datetime(2026, 1, 1, tzinfo=UTC))
    except CronSimError as error:
        raise ConfigError(f"{where}: invalid cron expression {schedule.cron!r}: {error}") from None
    if not isinstance(schedule.overlap, Overlap) or not isinstance(schedule.catch_up, CatchUp):
        raise ConfigError(f"{where}: overlap is an Overlap, catch_up a CatchUp")
    if schedule.flow not in flows:
        raise ConfigError(f"{where}: it starts flow {schedule.flow!r}, which is not registered")
    if not callable(schedule.input) and not isinstance(schedule.input, Mapping):
        raise ConfigError(f"{where}: input is a mapping or a function of the tick time")
    if isinstance(schedule.input, Mapping):
        try:  # a start message carries it as JSON: refuse now what every tick would refuse
            json.dumps(dict(schedule.input), allow_nan=False)
        except (TypeError, ValueError) as error:
            raise ConfigError(f"{where}: input is not a JSON object: {error}") from None


def checked(schedules: Iterable[Schedule], flows: Container[str]) -> dict[str, Schedule]:
    """The schedules by name, each checked; ConfigError on a duplicate name."""
    found: dict[str, Schedule] = {}
    for schedule in schedules:
        check(schedule, flows)
        if schedule.name in found:
            raise ConfigError(f"schedule {schedule.name!r} is declared twice")
        found[schedule.name] = schedule
    return found


def ticks_after(schedule: Schedule, after: datetime) -> Iterator[datetime]:
    """The schedule's ticks after ``after``, in UTC, oldest first (endless)."""
    for tick in CronSim(schedule.cron, after.astimezone(schedule.zone)):
        yield tick.astimezone(UTC)


def latest_tick(schedule: Schedule, now: datetime) -> datetime | None:
    """The newest tick at or before ``now``, in UTC (None if the expression has none)."""
    just_after = now.astimezone(schedule.zone) + timedelta(microseconds=1)
    for tick in CronSim(schedule.cron, just_after, reverse=True):
        return tick.astimezone(UTC)
    return None


def next_ticks(schedule: Schedule, now: datetime, count: int = 3) -> list[datetime]:
    """The next ``count`` ticks after ``now`` (UTC)."""
    found = []
    for tick in ticks_after(schedule, now):
        found.append(tick)
        if len(found) == count:
            break
    return found


@dataclass(frozen=True)
class Due:
    """What one tick run must do: start ``ticks`` (oldest first), drop ``missed`` ticks the
    catch-up policy does not run, and record ``handled_to`` as the last tick handled."""

    ticks: tuple[datetime, ...]
    missed: int
    handled_to: datetime


def due(schedule: Schedule, last: datetime | None, now: datetime) -> Due:
    """The ticks in ``(last, now]`` to start, the catch-up policy applied to the missed ones.

    ``last`` None (a schedule never handled: just deployed) counts only on-time ticks, so a
    new schedule starts at its next tick, not with a backfill. However old ``last`` is, the
    work is bounded: only the window the policy looks at is walked.
    """
    on_time_from = now - timedelta(seconds=ON_TIME_S)
    if last is None or last > now:
        last = on_time_from
    on_time = _between(schedule, max(last, on_time_from), now)
    policy = schedule.catch_up
    if policy.mode is CatchUpMode.ALL:
        oldest = now - timedelta(seconds=policy.window_s)
        caught = _between(schedule, max(last, oldest), min(now, on_time_from))
        starts = [*caught, *on_time]
    elif policy.mode is CatchUpMode.LATEST and not on_time:
        newest = latest_tick(schedule, on_time_from)
        starts = [newest] if newest is not None and newest > last else []
    else:
        starts = list(on_time)
    starts = starts[:MAX_TICKS_PER_RUN]
    # At the cap there may be more: the next run goes on from the last one started.
    handled_to = starts[-1] if len(starts) == MAX_TICKS_PER_RUN else now
    return Due(tuple(starts), _missed(schedule, last, handled_to, starts), handled_to)


def _between(schedule: Schedule, after: datetime, upto: datetime) -> list[datetime]:
    """The ticks in ``(after, upto]``, at most MAX_TICKS_PER_RUN of them."""
    found: list[datetime] = []
    if upto <= after:
        return found
    for tick in ticks_after(schedule, after):
        if tick > upto or len(found) == MAX_TICKS_PER_RUN:
            break
        found.append(tick)
    return found


def _missed(schedule: Schedule, after: datetime, upto: datetime, started: list[datetime]) -> int:
    """How many ticks in ``(after, upto]`` are not started (counted up to MAX_COUNTED)."""
    skipped = 0
    for tick in ticks_after(schedule, after):
        if tick > upto or skipped == MAX_COUNTED:
            break
        skipped += tick not in started
    return skipped


def flow_id_of(schedule: str, tick: datetime) -> str:
    """The id of the flow a tick starts: ``sched-nightly-20261203T0100Z`` (the tick in UTC)."""
    return f"{FLOW_ID_PREFIX}-{schedule}-{tick.astimezone(UTC):%Y%m%dT%H%MZ}"


def manual_id_of(schedule: str, at: datetime) -> str:
    """The id of a run an operator triggered at ``at``:
    ``sched-nightly-manual-20261203T010203Z``."""
    return f"{FLOW_ID_PREFIX}-{schedule}-manual-{at.astimezone(UTC):%Y%m%dT%H%M%SZ}"

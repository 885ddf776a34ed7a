"""The scheduler: each minute's tick run, and what operators do to schedules.

A tick run (``POST /schedules/tick``, from ONE fixed Cloud Scheduler job) reads each
schedule's document, works out the due ticks since the last one handled (``schedules.due``),
starts each through the engine's normal idempotent start under an id derived from the
schedule and the tick, and records what it did by compare-and-set. Two runs at once (a job
delivered twice, a run that overlaps a slow one) compute the same ticks and so the same ids:
the engine starts each flow once, and only one run's record lands; the other re-reads and
finds nothing left to do. A run that dies after starting and before recording is repeated by
the next one, whose starts are duplicates.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from relayflow.core.clock import Clock
from relayflow.core.engine import Engine, Started
from relayflow.core.errors import FlowNotFound, InvalidTransition, UnknownSchedule
from relayflow.core.schedule_state import ScheduleRun, ScheduleState, ScheduleStates
from relayflow.core.schedules import (
    Overlap,
    Schedule,
    due,
    flow_id_of,
    manual_id_of,
    next_ticks,
)
from relayflow.core.state import ACTIVE, Status

log = logging.getLogger("relayflow.core.scheduler")
# Compare-and-set attempts on one schedule's document before the run gives up on it (the
# next minute's run goes on where it stopped).
WRITE_ATTEMPTS = 8


@dataclass
class TickReport:
    """What one tick run did, over every schedule."""

    started: list[str] = field(default_factory=list)
    duplicate: int = 0
    skipped: int = 0
    missed: int = 0
    rejected: int = 0
    paused: int = 0
    errors: int = 0

    def to_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


class Scheduler:
    """Runs the schedules of the deployed app through ``engine``."""

    def __init__(
        self,
        engine: Engine,
        states: ScheduleStates,
        schedules: Iterable[Schedule],
        clock: Clock,
    ) -> None:
        self._engine = engine
        self._states = states
        self._schedules: Mapping[str, Schedule] = {s.name: s for s in schedules}
        self._clock = clock

    @property
    def schedules(self) -> tuple[Schedule, ...]:
        return tuple(self._schedules.values())

    def tick(self, now: datetime | None = None) -> TickReport:
        """Start every schedule's due ticks (as of ``now``: the clock's, unless a test or the
        local stack drives it). One schedule's failure never stops the others'."""
        now = now or self._clock.now()
        report = TickReport()
        for schedule in self._schedules.values():
            try:
                self._tick_one(schedule, now, report)
            except Exception:
                log.exception("schedule tick failed", extra={"schedule": schedule.name})
                report.errors += 1
        return report

    def pause(self, name: str, *, by: str = "", reason: str = "") -> ScheduleState:
        """Stop starting ``name``'s ticks; those that pass while it is paused are dropped (a
        resume does not catch them up)."""
        self.schedule(name)
        return self._change(name, lambda s: replace(s, paused=True, by=by, reason=reason))

    def resume(self, name: str, *, by: str = "", reason: str = "") -> ScheduleState:
        """Start ``name``'s ticks again, from the next one."""
        self.schedule(name)
        now = self._clock.now()

        def resumed(state: ScheduleState) -> ScheduleState:
            # Ticks of the pause are dropped even if no tick run saw them while it lasted (and
            # what a tick run handled is never handed back, whatever this clock says).
            handled_to = state.handled_to
            if state.paused:
                handled_to = max(handled_to, now) if handled_to is not None else now
            return replace(state, paused=False, by=by, reason=reason, handled_to=handled_to)

        return self._change(name, resumed)

    def trigger(
        self, name: str, *, by: str = "", reason: str = "", flow_id: str | None = None
    ) -> ScheduleRun:
        """Start ``name``'s flow now, paused or not, by ``flow_id`` (default
        ``sched-{name}-manual-{now}``). It ignores the overlap policy (an operator asked for
        it) but counts as the previous run for the next tick's."""
        schedule = self.schedule(name)
        now = self._clock.now()
        run_id = flow_id or manual_id_of(name, now)
        run = self._start(schedule, run_id, schedule.input_at(now), now, tick=None)
        run = replace(run, by=by, note=reason or run.note)
        self._change(name, lambda s: s.with_runs([run]))
        return run

    def schedule(self, name: str) -> Schedule:
        """The deployed schedule called ``name``, or UnknownSchedule naming those there are."""
        try:
            return self._schedules[name]
        except KeyError:
            known = ", ".join(sorted(self._schedules)) or "none"
            raise UnknownSchedule(f"unknown schedule {name!r} (deployed: {known})") from None

    def views(self, count: int = 3) -> list[dict[str, Any]]:
        """Every schedule: its declaration, paused or not, next ticks (in its zone and UTC),
        and last runs with their flows' status now."""
        now = self._clock.now()
        states = {state.name: state for state in self._states.read_all()}
        return [
            self._view(schedule, states.get(name) or ScheduleState(name), now, count)
            for name, schedule in sorted(self._schedules.items())
        ]

    def _tick_one(self, schedule: Schedule, now: datetime, report: TickReport) -> None:
        for _ in range(WRITE_ATTEMPTS):
            state = self._states.read(schedule.name)
            plan = due(schedule, state.handled_to, now)
            if state.paused:
                missed = state.missed + plan.missed + len(plan.ticks)
                if self._states.write(replace(state, handled_to=plan.handled_to, missed=missed)):
                    report.paused += 1
                    return
                continue
            runs = self._run_ticks(schedule, state, plan.ticks, now)
            new = replace(state.with_runs(runs), handled_to=plan.handled_to)
            if self._states.write(replace(new, missed=state.missed + plan.missed)):
                _count(report, runs, plan.missed)
                return
            # Another run recorded first; its starts were these (same ids): look again.
        raise RuntimeError(f"schedule {schedule.name}: {WRITE_ATTEMPTS} writers in a row won")

    def _run_ticks(
        self, schedule: Schedule, state: ScheduleState, ticks: Iterable[datetime], now: datetime
    ) -> list[ScheduleRun]:
        runs: list[ScheduleRun] = []
        for tick in ticks:
            previous = state.with_runs(runs).previous()
            runs.append(self._run_tick(schedule, tick, previous, now))
        return runs

    def _run_tick(
        self, schedule: Schedule, tick: datetime, previous: ScheduleRun | None, now: datetime
    ) -> ScheduleRun:
        flow_id = flow_id_of(schedule.name, tick)
        if self._status(flow_id) is not None:  # started by a run that did not record it
            return ScheduleRun(flow_id, "duplicate", now, tick, "already started")
        running = previous is not None and self._status(previous.flow_id) in ACTIVE
        if running and previous is not None and schedule.overlap is Overlap.SKIP:
            note = f"skipped, previous run {previous.flow_id} still running"
            return ScheduleRun(flow_id, "skipped", now, tick, note)
        if running and previous is not None and schedule.overlap is Overlap.CANCEL:
            self._cancel(schedule, previous.flow_id, tick)
        try:
            data = schedule.input_at(tick)
        except Exception as error:  # the app's function: say what it raised, start nothing
            return ScheduleRun(flow_id, "failed", now, tick, f"input: {error!r}"[:500])
        return self._start(schedule, flow_id, data, now, tick)

    def _start(
        self,
        schedule: Schedule,
        flow_id: str,
        data: dict[str, Any],
        now: datetime,
        tick: datetime | None,
    ) -> ScheduleRun:
        body = {"flow": schedule.flow, "input": data, "flow_id": flow_id}
        message = json.dumps(body, default=str).encode("utf-8")
        result = self._engine.start(message, message_id=flow_id, attributes={})
        outcome = {Started.STARTED: "started", Started.DUPLICATE: "duplicate"}
        return ScheduleRun(
            flow_id, outcome.get(result.outcome, "rejected"), now, tick, result.reason or ""
        )

    def _cancel(self, schedule: Schedule, flow_id: str, tick: datetime) -> None:
        reason = f"schedule {schedule.name}: superseded by its tick {tick:%Y-%m-%dT%H:%MZ}"
        # It may have ended meanwhile (or another tick run cancelled it): nothing to stop.
        with contextlib.suppress(InvalidTransition, FlowNotFound):
            self._engine.cancel(flow_id, reason, by=f"schedule:{schedule.name}")

    def _status(self, flow_id: str) -> Status | None:
        try:
            return self._engine.get(flow_id).status
        except FlowNotFound:
            return None

    def _change(self, name: str, change: Callable[[ScheduleState], ScheduleState]) -> ScheduleState:
        for _ in range(WRITE_ATTEMPTS):
            new = change(self._states.read(name))
            if self._states.write(new):
                return new
        raise RuntimeError(f"schedule {name}: {WRITE_ATTEMPTS} writers in a row won")

    def _view(
        self, schedule: Schedule, state: ScheduleState, now: datetime, count: int
    ) -> dict[str, Any]:
        upcoming = next_ticks(schedule, now, count)
        return {
            "name": schedule.name,
            "flow": schedule.flow,
            "cron": schedule.cron,
            "timezone": schedule.timezone,
            "overlap": schedule.overlap.value,
            "catch_up": schedule.catch_up.mode.value,
            "catch_up_window_s": schedule.catch_up.window_s or None,
            "description": schedule.description,
            "paused": state.paused,
            "by": state.by,
            "reason": state.reason,
            "handled_to": _iso(state.handled_to),
            "missed": state.missed,
            "next_ticks": [
                {"local": t.astimezone(schedule.zone).isoformat(), "utc": _iso(t)} for t in upcoming
            ],
            "runs": [self._run_view(run) for run in state.runs],
        }

    def _run_view(self, run: ScheduleRun) -> dict[str, Any]:
        status = self._status(run.flow_id) if run.started else None
        return {
            "flow_id": run.flow_id,
            "outcome": run.outcome,
            "status": status.value if status else None,
            "tick": _iso(run.tick),
            "at": _iso(run.at),
            "manual": run.manual,
            "note": run.note,
            "by": run.by,
        }


def _count(report: TickReport, runs: list[ScheduleRun], missed: int) -> None:
    report.missed += missed
    for run in runs:
        if run.outcome == "started":
            report.started.append(run.flow_id)
        elif run.outcome == "duplicate":
            report.duplicate += 1
        elif run.outcome == "skipped":
            report.skipped += 1
        else:
            report.rejected += 1


def _iso(at: datetime | None) -> str | None:
    return at.astimezone(UTC).isoformat() if at is not None else None

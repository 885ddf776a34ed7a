"""Schedules' state documents against the Firestore emulator: written by compare-and-set, and
two tick runs at once (each between the other's read and write) start each tick's flow once,
with flows in Firestore too."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

from google.cloud import firestore

from relayflow import ActionStep, Flow, Registry, Schedule
from relayflow.core.clock import FakeClock
from relayflow.core.engine import Engine, Started, StartResult
from relayflow.core.schedule_state import ScheduleRun, ScheduleState
from relayflow.core.scheduler import Scheduler
from relayflow.gcp.schedule_states import FirestoreScheduleStates
from relayflow.gcp.store import FlowStore
from relayflow.testing.memory import MemoryEvents, MemoryQueue

AT = datetime(2026, 12, 3, 2, 0, 30, tzinfo=UTC)
FLOW = Flow(name="reconcile", steps=(ActionStep("work", lambda ctx: {}),))
SCHEDULES = (
    Schedule("nightly", flow="reconcile", cron="0 2 * * *"),
    Schedule("hourly", flow="reconcile", cron="0 * * * *", input={"scope": "all"}),
)


def test_a_write_lands_only_on_the_version_it_read(firestore_client: firestore.Client) -> None:
    states = FirestoreScheduleStates(firestore_client)
    fresh = states.read("nightly")
    assert fresh == ScheduleState("nightly") and fresh.version is None
    run = ScheduleRun("sched-nightly-20261203T0200Z", "started", AT, AT, "", "")
    assert states.write(fresh.with_runs([run]))
    assert not states.write(fresh)  # created meanwhile: refused
    read = states.read("nightly")
    assert read.runs == (run,) and read.version is not None
    assert states.write(ScheduleState("nightly", paused=True, version=read.version))
    assert not states.write(ScheduleState("nightly", version=read.version))  # stale now
    assert [s.name for s in states.read_all()] == ["nightly"] and states.read("nightly").paused


class Meeting(FirestoreScheduleStates):
    """Holds every write until both tick runs have read: they race for each document."""

    def __init__(self, client: firestore.Client, barrier: threading.Barrier) -> None:
        super().__init__(client)
        self._barrier = barrier
        self._met: set[str] = set()

    def write(self, state: ScheduleState) -> bool:
        if state.name not in self._met:  # the first write of each: the other has read too
            self._met.add(state.name)
            self._barrier.wait(timeout=30)
        return super().write(state)


class Counting(Engine):
    """The engine, noting the flows its starts started (not the duplicates)."""

    started: list[str]

    def start(self, data: bytes, **kw: Any) -> StartResult:
        result = super().start(data, **kw)
        if result.outcome is Started.STARTED:
            self.__dict__.setdefault("started", []).append(result.flow_id)
        return result


def test_two_tick_runs_at_once_start_each_flow_once(
    firestore_client: firestore.Client, flow_store: FlowStore
) -> None:
    registry = Registry((FLOW,), schedules=SCHEDULES)
    clock = FakeClock(AT)
    engine = Counting(
        registry=registry, store=flow_store, queue=MemoryQueue(), events=MemoryEvents(), clock=clock
    )
    barrier = threading.Barrier(2)
    reports = []

    def tick() -> None:
        states = Meeting(firestore_client, barrier)
        reports.append(Scheduler(engine, states, registry.schedules, clock).tick())

    runs = [threading.Thread(target=tick) for _ in range(2)]
    for run in runs:
        run.start()
    for run in runs:
        run.join(timeout=60)
    assert len(reports) == 2 and all(r.errors == 0 for r in reports)
    # Each flow started once, whichever run started it (the other's start was a duplicate).
    assert sorted(engine.started) == ["sched-hourly-20261203T0200Z", "sched-nightly-20261203T0200Z"]
    states = FirestoreScheduleStates(firestore_client).read_all()
    assert [[run.flow_id for run in s.runs] for s in states] == [
        ["sched-hourly-20261203T0200Z"],
        ["sched-nightly-20261203T0200Z"],
    ]
    assert flow_store.get("sched-hourly-20261203T0200Z").input == {"scope": "all"}

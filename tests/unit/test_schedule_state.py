"""A schedule's document: its runs kept newest first and bounded, the previous run the overlap
policy looks at, its Firestore form both ways, and compare-and-set in the memory store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from relayflow.core.schedule_state import MAX_RUNS, ScheduleRun, ScheduleState
from relayflow.testing.memory import MemoryScheduleStates

AT = datetime(2026, 12, 3, 2, tzinfo=UTC)


def run(i: int, outcome: str = "started") -> ScheduleRun:
    tick = AT + timedelta(hours=i)
    return ScheduleRun(f"sched-n-{i}", outcome, tick, tick)


def test_runs_are_kept_newest_first_and_bounded() -> None:
    state = ScheduleState("n").with_runs([run(i) for i in range(MAX_RUNS + 5)])
    assert len(state.runs) == MAX_RUNS
    assert state.runs[0].flow_id == f"sched-n-{MAX_RUNS + 4}"


def test_the_previous_run_is_the_newest_that_started_a_flow() -> None:
    state = ScheduleState("n").with_runs([run(1), run(2, "duplicate"), run(3, "skipped")])
    assert state.previous() == run(2, "duplicate")
    assert ScheduleState("n").with_runs([run(1, "rejected")]).previous() is None


def test_a_manual_run_has_no_tick() -> None:
    manual = ScheduleRun("sched-n-manual-x", "started", AT, None, "by hand", "op@x")
    assert manual.manual and not run(1).manual


def test_the_document_reads_back_as_it_was_written() -> None:
    state = ScheduleState("n", True, "op@x", "drill", AT, (run(1), run(2, "skipped")), 3)
    again = ScheduleState.from_dict("n", state.to_dict(), version="v1")
    assert again == state and again.version == "v1"
    assert ScheduleState.from_dict("n", {}, None) == ScheduleState("n")


def test_a_write_lands_only_on_the_version_read() -> None:
    states = MemoryScheduleStates()
    fresh = states.read("n")
    assert states.write(fresh) and not states.write(fresh)
    current = states.read("n")
    assert states.write(ScheduleState("n", paused=True, version=current.version))
    assert not states.write(ScheduleState("n", version=current.version))
    assert states.read("n").paused and (states.writes, states.conflicts) == (2, 2)

"""``relayflow schedules``: its arguments, and the table it prints of the api's views."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from relayflow import ActionStep, Flow, Registry, Schedule
from relayflow.cli import commands, render, shapes
from relayflow.core.schedules import SCHEDULE_NAME_PATTERN
from relayflow.testing import Harness


def test_the_cli_checks_schedule_names_as_the_core_does() -> None:
    assert commands.SCHEDULE_NAME.pattern == SCHEDULE_NAME_PATTERN[1:-1]


def test_the_cli_parses_each_schedules_action() -> None:
    parser = commands.build_parser()
    listed = parser.parse_args(["schedules", "list"])
    assert listed.schedules_action == "list"
    triggered = parser.parse_args(
        ["schedules", "trigger", "nightly", "--reason", "by hand", "--flow-id", "rerun-1"]
    )
    assert (triggered.schedule, triggered.reason, triggered.flow_id) == (
        "nightly",
        "by hand",
        "rerun-1",
    )
    with pytest.raises(SystemExit):
        parser.parse_args(["schedules", "pause", "nightly"])  # no reason
    with pytest.raises(SystemExit):
        parser.parse_args(["schedules", "pause", "Not A Name", "--reason", "x"])


def test_the_schedule_table_shows_next_ticks_in_both_zones_and_runs_with_status() -> None:
    flow = Flow(name="reconcile", steps=(ActionStep("work", lambda ctx: {}),))
    schedule = Schedule("nightly", "reconcile", "0 2 * * *", timezone="Europe/Berlin")
    h = Harness(Registry((flow,), schedules=(schedule,)), start=datetime(2026, 12, 3, tzinfo=UTC))
    h.run_until(h.now + timedelta(days=1))
    h.scheduler.pause("nightly", by="op@x", reason="drill")
    table = render.schedule_table(h.scheduler.views()).splitlines()
    assert table[0].startswith("nightly  reconcile  '0 2 * * *' Europe/Berlin  overlap skip")
    assert table[0].endswith("catch-up latest  paused by op@x: drill")
    assert table[1].split() == ["next", "2026-12-04T02:00:00+01:00", "(2026-12-04T01:00:00+00:00)"]
    assert table[4].split() == ["run", "sched-nightly-20261203T0100Z", "started", "SUCCEEDED"]
    assert render.schedule_table([]) == "no schedules"


def test_the_graph_names_the_schedules_that_start_a_flow() -> None:
    schedule = Schedule("nightly", "reconcile", "0 2 * * *", timezone="Europe/Berlin")
    other = Schedule("weekly", "report", "0 3 * * 1")
    lines = shapes.scheduled([schedule, other], "reconcile", mermaid=False)
    assert lines == [
        "started by schedule nightly: '0 2 * * *' Europe/Berlin (overlap skip, catch-up latest)"
    ]
    assert shapes.scheduled([schedule], "reconcile", mermaid=True)[0].startswith("%% started by")

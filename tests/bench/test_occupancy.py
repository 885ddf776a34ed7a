"""bench/occupancy: the plan, the access-log lines it sums, and the figures of one side."""

from __future__ import annotations

import pytest

from bench.occupancy import ACCESS_TAG, Side, parse_plan, request_times, table


def test_a_plan_is_delays_and_flows() -> None:
    assert parse_plan("5:192, 20:96") == [(5.0, 192), (20.0, 96)]


@pytest.mark.parametrize("bad", ["5", "5:0", "-1:16", "5:x", ""])
def test_a_bad_plan_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_plan(bad)


def test_only_the_bench_access_lines_are_summed() -> None:
    # given a service log with the bench's access lines among other log lines
    log = "\n".join(
        [
            '{"severity": "INFO", "message": "step ran"}',
            f"{ACCESS_TAG} POST /tasks/step 200 25000",
            f"{ACCESS_TAG} POST /tasks/poll 200 1500000",
            "[2025-01-01 00:00:00 +0000] [7] [INFO] Booting worker with pid: 7",
        ]
    )
    # then two requests are counted, 1.525 s in all
    assert request_times(log) == (2, pytest.approx(1.525))


def _side(design: str, wall_s: float, held_s: float, cpu_s: float) -> Side:
    return Side(
        design=design,
        delay_s=5.0,
        flows=4,
        ok=4,
        wall_s=wall_s,
        run_times_s=[5.0, 5.0, 5.0, 5.0],
        latencies_s=[6.0] * 4,
        polls=16,
        held_s=held_s,
        cpu_s=cpu_s,
    )


def test_occupancy_is_busy_seconds_over_flow_seconds() -> None:
    side = _side("relayflow", wall_s=8.0, held_s=2.0, cpu_s=0.4)
    assert side.flows_per_s == 0.5
    assert side.held_occupancy == pytest.approx(0.1)
    assert side.cpu_occupancy == pytest.approx(0.02)


def test_the_table_shows_each_design_and_relayflow_over_sleeping() -> None:
    # given the pool holding its threads for the whole 20 flow-seconds, relayflow for 2
    sleeping = _side("sleeping", wall_s=10.0, held_s=20.0, cpu_s=0.02)
    relayflow = _side("relayflow", wall_s=5.0, held_s=2.0, cpu_s=0.4)
    # when the table is drawn
    rows = table([sleeping, relayflow]).splitlines()
    # then the third row divides relayflow's figures by the pool's
    ratio = rows[4].split()
    assert rows[2].split()[:3] == ["5s", "sleeping", "4/4"]
    assert "100.0%" in rows[2].split()
    assert ratio[:2] == ["5s", "relayflow"]
    assert ratio[-11:-8] == ["1.00x", "0.50x", "2.00x"]  # polls/flow, wall s, flows/s
    assert ratio[-4:-2] == ["0.10x", "0.10x"]  # held s, held occupancy

"""bench/outage: the pairs' ratios and medians, and where the recovery went second by second."""

from __future__ import annotations

from bench.outage import Outcome, per_second, summary


def outcome(
    mode: str, dead_calls: int, recovery_s: float, p50_s: float, failed: int = 0
) -> Outcome:
    statuses = {"SUCCEEDED": 500 - failed, **({"FAILED": failed} if failed else {})}
    return Outcome(
        mode, 500, statuses, dead_calls, recovery_s, p50_s, p50_s, 500, "", None, 0, 0, 0, 0
    )


def test_each_pair_gives_its_ratios_and_the_summary_their_medians() -> None:
    pairs = [
        [outcome("off", 3000, 10.0, 5.0), outcome("on", 100, 12.0, 6.0)],
        [outcome("off", 3000, 10.0, 5.0), outcome("on", 300, 9.0, 4.0, failed=2)],
        [outcome("off", 3000, 10.0, 5.0), outcome("on", 200, 10.0, 5.0)],
    ]
    lines = summary(pairs).splitlines()
    assert lines[1].split() == ["1", "30.0x", "1.20", "1.20", "0/0"]
    assert lines[2].split() == ["2", "10.0x", "0.90", "0.80", "2/0"]
    assert lines[-1].split() == ["median", "15.0x", "1.00", "1.00"]


def test_per_second_counts_the_ends_in_each_second_after_the_return() -> None:
    assert per_second([0.2, 0.9, 1.0, 3.5]) == "2 1 0 1"
    assert per_second([]) == "0"

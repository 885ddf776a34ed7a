"""relayflow.core.clock: the wall clock in UTC, and a fake one that moves only when told to."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from relayflow.core.clock import FakeClock, SystemClock


def test_the_system_clock_tells_the_time_in_utc() -> None:
    before = datetime.now(UTC)
    now = SystemClock().now()
    assert now.tzinfo is UTC
    assert before <= now <= datetime.now(UTC)


def test_a_fake_clock_stands_still_until_it_is_advanced() -> None:
    start = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    clock = FakeClock(start)
    assert clock.now() == clock.now() == start
    clock.advance(1.5)
    clock.advance(60)
    assert clock.now() == start + timedelta(seconds=61.5)


def test_a_fake_clock_starts_at_a_fixed_instant_unless_told_otherwise() -> None:
    assert FakeClock().now() == datetime(2026, 1, 1, tzinfo=UTC)

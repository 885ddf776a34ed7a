"""relayflow/emulators/cloud_tasks/retry.py: the retry schedule and stop rule, exactly."""

from __future__ import annotations

import pytest

from relayflow.emulators.cloud_tasks.retry import (
    RetryPolicy,
    next_attempt_delay_us,
    retry_interval_us,
    should_retry,
)

S = 1_000_000


def policy(**fields: int) -> RetryPolicy:
    values = {
        "max_attempts": 100,
        "max_retry_duration_us": 0,
        "min_backoff_us": 10 * S,
        "max_backoff_us": 300 * S,
        "max_doublings": 3,
    }
    values.update(fields)
    return RetryPolicy(**values)


def test_documented_schedule_doubles_then_grows_linearly_then_caps() -> None:
    intervals = [
        retry_interval_us(
            retry_number=n, min_backoff_us=10 * S, max_backoff_us=300 * S, max_doublings=3
        )
        // S
        for n in range(1, 11)
    ]

    assert intervals == [10, 20, 40, 80, 160, 240, 300, 300, 300, 300]


def test_zero_doublings_grows_linearly_from_the_first_retry() -> None:
    intervals = [
        retry_interval_us(retry_number=n, min_backoff_us=S, max_backoff_us=5 * S, max_doublings=0)
        // S
        for n in range(1, 8)
    ]

    assert intervals == [1, 2, 3, 4, 5, 5, 5]


def test_service_defaults_reach_the_one_hour_cap() -> None:
    first = retry_interval_us(
        retry_number=1, min_backoff_us=100_000, max_backoff_us=3600 * S, max_doublings=16
    )
    late = retry_interval_us(
        retry_number=20, min_backoff_us=100_000, max_backoff_us=3600 * S, max_doublings=16
    )

    assert (first, late) == (100_000, 3600 * S)


def test_retry_numbers_start_at_one() -> None:
    with pytest.raises(ValueError):
        retry_interval_us(retry_number=0, min_backoff_us=1, max_backoff_us=1, max_doublings=1)


def test_max_attempts_counts_the_first_attempt() -> None:
    limited = policy(max_attempts=3)

    assert should_retry(policy=limited, dispatch_count=2, first_attempt_us=0, now_us=0)
    assert not should_retry(policy=limited, dispatch_count=3, first_attempt_us=0, now_us=0)


def test_unlimited_attempts_never_stop_without_a_duration() -> None:
    unlimited = policy(max_attempts=-1)

    assert should_retry(policy=unlimited, dispatch_count=10_000, first_attempt_us=0, now_us=10**12)


def test_unlimited_attempts_stop_when_the_duration_is_spent() -> None:
    timed = policy(max_attempts=-1, max_retry_duration_us=60 * S)

    assert should_retry(policy=timed, dispatch_count=50, first_attempt_us=0, now_us=59 * S)
    assert not should_retry(policy=timed, dispatch_count=50, first_attempt_us=0, now_us=60 * S)


def test_retrying_stops_only_when_both_limits_are_reached() -> None:
    both = policy(max_attempts=3, max_retry_duration_us=60 * S)

    # attempts reached, duration not: keep going
    assert should_retry(policy=both, dispatch_count=5, first_attempt_us=0, now_us=10 * S)
    # duration reached, attempts not: keep going
    assert should_retry(policy=both, dispatch_count=2, first_attempt_us=0, now_us=90 * S)
    # both reached: stop
    assert not should_retry(policy=both, dispatch_count=3, first_attempt_us=0, now_us=60 * S)


def test_retry_after_longer_than_the_backoff_wins() -> None:
    p = policy(min_backoff_us=S)

    assert next_attempt_delay_us(policy=p, dispatch_count=1, retry_after_us=0) == S
    assert next_attempt_delay_us(policy=p, dispatch_count=1, retry_after_us=7 * S) == 7 * S
    assert next_attempt_delay_us(policy=p, dispatch_count=3, retry_after_us=S // 2) == 4 * S

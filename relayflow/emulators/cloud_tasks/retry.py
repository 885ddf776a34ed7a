"""The queue's RetryConfig as pure functions: when to retry and whether to retry at all."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """A queue's RetryConfig with defaults applied; durations in microseconds."""

    max_attempts: int  # counts the first attempt; -1 = unlimited
    max_retry_duration_us: int  # 0 = unlimited
    min_backoff_us: int
    max_backoff_us: int
    max_doublings: int


def retry_interval_us(
    *, retry_number: int, min_backoff_us: int, max_backoff_us: int, max_doublings: int
) -> int:
    """Delay before retry `retry_number` (1 = the first retry).

    The interval starts at min_backoff, doubles max_doublings times, then grows linearly by
    min_backoff * 2**max_doublings, always capped at max_backoff: with 10 s / 300 s / 3 the
    retries come at 10, 20, 40, 80, 160, 240, 300, 300 ... s.
    """
    if retry_number < 1:
        raise ValueError("retry_number starts at 1")
    doublings = retry_number - 1
    if doublings <= max_doublings:
        interval = min_backoff_us << doublings
    else:
        interval = (min_backoff_us << max_doublings) * (doublings - max_doublings + 1)
    return min(interval, max_backoff_us)


def should_retry(
    *, policy: RetryPolicy, dispatch_count: int, first_attempt_us: int, now_us: int
) -> bool:
    """Whether a task that just failed its `dispatch_count`-th attempt gets another one.

    Each limit that is set must be reached before retrying stops; an unset limit
    (max_attempts -1, max_retry_duration 0) never stops it on its own.
    """
    attempts_set = policy.max_attempts != -1
    duration_set = policy.max_retry_duration_us > 0
    if not attempts_set and not duration_set:
        return True
    attempts_reached = not attempts_set or dispatch_count >= policy.max_attempts
    duration_reached = not duration_set or (
        now_us - first_attempt_us >= policy.max_retry_duration_us
    )
    return not (attempts_reached and duration_reached)


def next_attempt_delay_us(*, policy: RetryPolicy, dispatch_count: int, retry_after_us: int) -> int:
    """Delay before the next attempt: the backoff, or a longer Retry-After the target asked for."""
    backoff = retry_interval_us(
        retry_number=dispatch_count,
        min_backoff_us=policy.min_backoff_us,
        max_backoff_us=policy.max_backoff_us,
        max_doublings=policy.max_doublings,
    )
    return max(backoff, retry_after_us)

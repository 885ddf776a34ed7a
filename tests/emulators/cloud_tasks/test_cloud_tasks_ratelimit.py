"""relayflow/emulators/cloud_tasks/ratelimit.py: the token bucket, with a fake clock."""

from __future__ import annotations

from relayflow.emulators.cloud_tasks.clock import FakeClock
from relayflow.emulators.cloud_tasks.ratelimit import TokenBucket, burst_size_for


def test_burst_size_follows_the_rate_like_the_service() -> None:
    assert burst_size_for(500) == 100
    assert burst_size_for(10) == 2
    assert burst_size_for(0.5) == 1


def test_a_full_bucket_allows_a_burst_then_paces_at_the_rate() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate_per_s=10, burst=3, now_us=clock.now_us())

    for _ in range(3):
        assert bucket.wait_us(clock.now_us()) == 0
        bucket.take(clock.now_us())

    assert bucket.wait_us(clock.now_us()) == 100_000
    clock.advance(100_000)
    assert bucket.wait_us(clock.now_us()) == 0


def test_tokens_never_exceed_the_burst() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate_per_s=10, burst=2, now_us=clock.now_us())
    clock.advance(60_000_000)

    bucket.take(clock.now_us())
    bucket.take(clock.now_us())

    assert bucket.wait_us(clock.now_us()) == 100_000


def test_lowering_the_rate_applies_at_once() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate_per_s=100, burst=1, now_us=clock.now_us())
    bucket.take(clock.now_us())

    bucket.reconfigure(rate_per_s=1, burst=1, now_us=clock.now_us())

    assert bucket.wait_us(clock.now_us()) == 1_000_000

"""relayflow.core.breakers' paced flushes: however many instances share a window document,
it takes about ``TARGET_WRITES_PER_S`` writes a second, while one instance alone still adds
its counts every ``flush_s`` and a fleet still opens the breaker on a failing dependency.

A fleet here is many ``Breakers`` over one in-memory store on one fake clock, each calling the
dependency on its own schedule; the store counts the writes each window document takes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from relayflow.core.breaker_policy import BreakerPolicy, Dependencies
from relayflow.core.breaker_state import (
    MAX_FLUSH_S,
    SETTLED_WRITES_PER_S,
    TARGET_WRITES_PER_S,
    Breaker,
    Counts,
    bucket_start,
    flush_interval_s,
    writers,
)
from relayflow.core.breakers import FLUSH_S, Breakers
from relayflow.core.clock import FakeClock
from relayflow.testing.memory import MemoryBreakers

DEP = "client-api"
POLICY = BreakerPolicy(window_s=30, min_calls=20, failure_rate=0.5)
TICK_S = 0.1
NOW = datetime(2026, 3, 1, 12, 0, 30, tzinfo=UTC)


@dataclass
class Fleet:
    """``size`` instances sharing ``shards`` window documents, each calling every
    ``every_s`` seconds (at its own phase)."""

    size: int
    every_s: float
    shards: int = 1
    seed: int = 7

    def __post_init__(self) -> None:
        self.store, self.clock = MemoryBreakers(), FakeClock(NOW)
        rng = random.Random(self.seed)
        policies = Dependencies(dependencies={DEP: POLICY})
        self.instances = [
            Breakers(
                self.store,
                policies,
                self.clock,
                shards=self.shards,
                shard=i % self.shards,
                rng=random.Random(rng.random()),
            )
            for i in range(self.size)
        ]
        steps = max(1, round(self.every_s / TICK_S))
        self.phases = [rng.randrange(steps) for _ in range(self.size)]
        self.steps, self.tick, self.calls, self.put_off = steps, 0, 0, 0

    def run(self, seconds: float, *, ok: bool = True) -> None:
        for _ in range(round(seconds / TICK_S)):
            for instance, phase in zip(self.instances, self.phases, strict=True):
                if (self.tick + phase) % self.steps == 0:
                    self.call(instance, ok=ok)
            self.tick += 1
            self.clock.advance(TICK_S)

    def call(self, instance: Breakers, *, ok: bool) -> None:
        verdict = instance.check(DEP, retry=False)
        if verdict.run:
            self.calls += 1
            instance.record(verdict, ok=ok, latency_s=0.05)
        else:
            self.put_off += 1

    def writes(self, shard: int = 0) -> int:
        return self.store.window_writes[(DEP, shard)]

    def rate(self, seconds: float, shard: int = 0) -> float:
        """Writes a second to one window document over the next ``seconds``."""
        before = self.writes(shard)
        self.run(seconds)
        return (self.writes(shard) - before) / seconds


def test_one_instance_alone_adds_its_counts_every_flush_interval() -> None:
    fleet = Fleet(size=1, every_s=0.2)
    fleet.run(5)
    assert fleet.writes() == 3  # its first call's, then one every FLUSH_S (2 s)
    assert fleet.rate(60) == pytest.approx(1 / FLUSH_S, abs=0.02)
    assert fleet.instances[0].flush_interval_s(DEP) == FLUSH_S
    assert 1 / FLUSH_S <= TARGET_WRITES_PER_S


def test_two_instances_sharing_a_shard_stretch_their_interval_to_stay_at_the_target() -> None:
    fleet = Fleet(size=2, every_s=0.5)
    fleet.run(30)
    # Two at FLUSH_S write 1/s: over the target, so they stretch to ~4 s each: ~0.5/s together.
    assert fleet.rate(60) <= TARGET_WRITES_PER_S * 1.2
    assert fleet.instances[0].flush_interval_s(DEP) > FLUSH_S


@pytest.mark.parametrize("size", [10, 100])
def test_instances_sharing_a_shard_converge_to_the_target_rate_whatever_their_number(
    size: int,
) -> None:
    fleet = Fleet(size=size, every_s=2.0)
    fleet.run(40)  # they start at a write every FLUSH_S each, read the crowd and spread out
    rate = fleet.rate(160)
    assert 0.35 <= rate <= SETTLED_WRITES_PER_S  # TARGET_WRITES_PER_S, give or take noise
    assert rate <= 0.7  # never above 70 % of Firestore's 1/s per document


def test_each_shard_of_a_fleet_converges_on_its_own() -> None:
    fleet = Fleet(size=32, every_s=2.0, shards=4)
    fleet.run(40)
    before = [fleet.writes(k) for k in range(4)]
    fleet.run(160)
    rates = [(fleet.writes(k) - before[k]) / 160 for k in range(4)]
    assert all(0.35 <= r <= SETTLED_WRITES_PER_S for r in rates), rates


def test_when_the_fleet_shrinks_the_survivor_goes_back_to_flushing_every_second() -> None:
    fleet = Fleet(size=100, every_s=2.0)
    fleet.run(60)
    survivor = fleet.instances[0]
    assert survivor.flush_interval_s(DEP) > POLICY.window_s  # 100 writers: ~200 s each
    fleet.instances, fleet.phases = [survivor], [0]
    fleet.run(2 * POLICY.window_s)  # the others' flushes leave the window: it reads itself alone
    assert survivor.flush_interval_s(DEP) == FLUSH_S
    assert fleet.rate(30) == pytest.approx(1 / FLUSH_S, abs=0.05)


def test_a_fleet_of_200_opens_the_breaker_within_the_window_when_the_dependency_fails() -> None:
    # 200 instances calling once every 5 s each: 40 calls/s, 6 per instance per window, so no
    # instance alone ever sees min_calls=20; only the shared (now sampled) window can open it.
    fleet = Fleet(size=200, every_s=5.0, shards=4)
    fleet.run(80)
    assert fleet.store.breaker(DEP)[0].state is Breaker.CLOSED
    interval = fleet.instances[0].flush_interval_s(DEP)
    assert interval > POLICY.window_s  # 50 writers a shard: each shares a sample of its window
    writes = sum(fleet.writes(k) for k in range(4))
    for _ in range(round(POLICY.window_s / 1.0)):
        fleet.run(1.0, ok=False)
        if fleet.store.breaker(DEP)[0].state is not Breaker.CLOSED:
            break
    assert fleet.store.breaker(DEP)[0].state is Breaker.OPEN
    # and the outage did not bring the writes back: still about 0.5/s per shard
    opened_at = fleet.store.breaker(DEP)[0].transitions[-1].at
    elapsed = (opened_at - NOW).total_seconds() - 80
    assert elapsed <= POLICY.window_s
    assert sum(fleet.writes(k) for k in range(4)) - writes <= 4 * 0.7 * elapsed + 4


def test_writers_count_the_seconds_of_instance_time_each_addition_stands_for() -> None:
    start = bucket_start(POLICY, NOW)
    # Over the last window (29 s: its 30 buckets, the newest just begun): 3 additions at 10 s
    # and 2 at 60 s, 150 s of instance time; the one 40 s back is out of it.
    shard = {start - 5: Counts(flushes=3, interval_ms=30_000), start: Counts(flushes=2,
             interval_ms=120_000), start - 40: Counts(flushes=50, interval_ms=50_000)}  # fmt: skip
    assert writers(shard, POLICY, NOW) == pytest.approx(150 / 29)
    wanted = flush_interval_s(shard, POLICY, NOW, flush_s=1.0)
    assert wanted == pytest.approx(150 / 29 / TARGET_WRITES_PER_S)
    assert flush_interval_s({}, POLICY, NOW, flush_s=2.0) == 2.0  # alone: every flush_s
    crowd = {start: Counts(flushes=1, interval_ms=10**12)}
    assert flush_interval_s(crowd, POLICY, NOW, flush_s=1.0) == MAX_FLUSH_S


def test_an_instance_flushing_less_than_once_a_window_shares_only_its_last_window() -> None:
    store, clock = MemoryBreakers(), FakeClock(NOW)
    b = Breakers(store, Dependencies(dependencies={DEP: POLICY}), clock, shards=1, shard=0)
    for _ in range(100):
        window = store.windows.setdefault((DEP, 0), {})  # as if thousands shared the shard
        window.setdefault(bucket_start(POLICY, clock.now()), {}).update(interval_ms=10**9)
        verdict = b.check(DEP, retry=False)
        b.record(verdict, ok=True, latency_s=0.05)
        clock.advance(1.0)
    b.flush()
    shared = store.counts(DEP, 1)
    assert sum(c.calls for c in shared.values()) <= POLICY.window_s + 2  # the last window's
    assert len(b._known[DEP].pending) == 0


def test_breakers_refuse_a_shard_count_or_interval_that_cannot_be() -> None:
    with pytest.raises(ValueError, match="shards >= 1"):
        Breakers(MemoryBreakers(), Dependencies(), FakeClock(), shards=0)
    with pytest.raises(ValueError, match="flush_s > 0"):
        Breakers(MemoryBreakers(), Dependencies(), FakeClock(), flush_s=0)

"""Breakers in the Firestore emulator: compare-and-set transitions, window counts added by
increments from several instances and shards, old buckets dropped, and two engines' Breakers
sharing one breaker."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from google.cloud import firestore

from relayflow.core.breaker_policy import BreakerPolicy, Dependencies
from relayflow.core.breaker_state import Breaker, BreakerState, Counts
from relayflow.core.breakers import Breakers
from relayflow.core.clock import FakeClock
from relayflow.gcp.breakers import FirestoreBreakers

DEP = "client-api"


def counts(calls: int, failures: int, latency_s: float = 0.05) -> Counts:
    c = Counts(calls=calls, failures=failures, first=calls)
    for _ in range(calls):
        c.observe(latency_s)
    return c


def test_a_transition_is_written_once_against_the_version_it_read(
    firestore_client: firestore.Client,
) -> None:
    store = FirestoreBreakers(firestore_client)
    fresh, never = store.breaker(DEP)
    assert fresh == BreakerState(DEP) and never is None
    now = datetime(2026, 1, 1, tzinfo=UTC)
    opened = fresh.to(Breaker.OPEN, now, "test", reopen_at=now + timedelta(seconds=10), opened=1)
    written, version = store.put_breaker(opened, version=None)
    assert written and version is not None
    assert store.put_breaker(opened, version=None) == (False, None)  # a rival's create
    half = opened.to(Breaker.HALF_OPEN, now, "probing")
    assert store.put_breaker(half, version=version)[0]
    assert store.put_breaker(half, version=version) == (False, None)  # stale version
    stored, _ = store.breaker(DEP)
    assert stored.state is Breaker.HALF_OPEN
    assert [t.to for t in stored.transitions] == [Breaker.OPEN, Breaker.HALF_OPEN]
    assert store.breakers() == [stored]


def test_window_counts_add_up_across_shards_and_writers_and_old_buckets_go(
    firestore_client: firestore.Client,
) -> None:
    store = FirestoreBreakers(firestore_client)
    store.add_counts(DEP, 0, {100: counts(3, 1), 105: counts(2, 2)}, drop=[])
    store.add_counts(DEP, 0, {105: counts(1, 0, latency_s=3.0)}, drop=[])  # same shard
    store.add_counts(DEP, 1, {105: counts(4, 4)}, drop=[])
    total = store.counts(DEP, shards=2)
    assert (total[100].calls, total[100].failures) == (3, 1)
    assert (total[105].calls, total[105].failures, total[105].first) == (7, 6, 7)
    assert sum(total[105].latency) == 7 and total[105].p95_s() == 5.0
    store.add_counts(DEP, 0, {110: counts(1, 0)}, drop=[100])
    assert sorted(store.counts(DEP, shards=2)) == [105, 110]


def test_two_instances_share_the_breaker_through_firestore(
    firestore_client: firestore.Client,
) -> None:
    clock = FakeClock()
    policy = Dependencies(dependencies={DEP: BreakerPolicy(min_calls=4, open_s=10)})
    a = Breakers(FirestoreBreakers(firestore_client), policy, clock, shards=2, shard=0)
    b = Breakers(FirestoreBreakers(firestore_client), policy, clock, shards=2, shard=1)
    for instance in (a, b, a, b):
        verdict = instance.check(DEP, retry=False)
        instance.record(verdict, ok=False, latency_s=0.1)
        clock.advance(1.0)  # each flushes, and reads the other's counts
    assert FirestoreBreakers(firestore_client).breaker(DEP)[0].state is Breaker.OPEN
    clock.advance(1.0)
    assert not a.check(DEP, retry=False).run and not b.check(DEP, retry=False).run
    # a probes (one, then the other two together) and closes it; b learns it on its next read,
    # once: what b put off meanwhile may come forward (a brings its own forward as it closes)
    clock.advance(10.0)
    first = a.check(DEP, retry=False)
    assert first.probe and not b.check(DEP, retry=False).run  # the first probe goes alone
    a.record(first, ok=True, latency_s=0.1)
    for _ in range(2):
        probe = a.check(DEP, retry=False)
        assert probe.probe
        a.record(probe, ok=True, latency_s=0.1)
    assert FirestoreBreakers(firestore_client).breaker(DEP)[0].state is Breaker.CLOSED
    assert a.closed_elsewhere() == []
    clock.advance(1.0)
    assert b.check(DEP, retry=False).run
    assert b.closed_elsewhere() == [DEP]
    assert b.closed_elsewhere() == []


def test_each_shard_counts_its_own_additions_for_the_instances_pacing_them(
    firestore_client: firestore.Client,
) -> None:
    store = FirestoreBreakers(firestore_client)
    store.add_counts(DEP, 2, {100: Counts(calls=1, flushes=1, interval_ms=2_000)}, drop=[])
    store.add_counts(DEP, 2, {100: Counts(calls=2, flushes=1, interval_ms=30_000)}, drop=[])
    store.add_counts(DEP, 0, {101: Counts(calls=5, flushes=1, interval_ms=2_000)}, drop=[])

    shards = store.shard_counts(DEP, shards=3)

    # Increments from two writers of shard 2 add up; each shard is read as its own.
    assert [sorted(shard) for shard in shards] == [[101], [], [100]]
    assert (shards[2][100].flushes, shards[2][100].interval_ms) == (2, 32_000)
    assert (shards[2][100].calls, shards[0][101].interval_ms) == (3, 2_000)
    assert sorted(store.counts(DEP, shards=3)) == [100, 101]  # still summed for whoever sums
    raw = firestore_client.collection("breaker_windows").document(f"{DEP}.2").get().to_dict()
    assert raw["buckets"]["t100"]["flushes"] == 2 and raw["shard"] == 2


def test_instances_pace_their_flushes_through_firestore(
    firestore_client: firestore.Client,
) -> None:
    clock = FakeClock()
    policy = Dependencies(dependencies={DEP: BreakerPolicy(min_calls=1000)})
    fleet = [
        Breakers(FirestoreBreakers(firestore_client), policy, clock, shards=1, shard=0)
        for _ in range(4)
    ]
    for _ in range(40):  # four instances calling every second for 40 s
        for instance in fleet:
            instance.record(instance.check(DEP, retry=False), ok=True, latency_s=0.1)
        clock.advance(1.0)
    # Four writers at FLUSH_S would take 2/s; they read each other's additions and stretch.
    assert all(instance.flush_interval_s(DEP) >= 6.0 for instance in fleet)
    shard = FirestoreBreakers(firestore_client).shard_counts(DEP, shards=1)[0]
    recent = [c.flushes for b, c in shard.items() if b >= clock.now().timestamp() - 20]
    assert sum(recent) <= 20 * 0.7

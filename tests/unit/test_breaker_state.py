"""relayflow.core.breaker_state: a breaker's stored state and its bounded trail of transitions,
its window's counts (calls, failures, first tries, retries, a latency histogram for p95), and
what one process knows of them: the window it judges by, and what it adds to the shared one."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta

from relayflow.core.breaker_policy import BreakerPolicy
from relayflow.core.breaker_state import (
    LATENCY_BOUNDS_S,
    MAX_TRANSITIONS,
    Breaker,
    BreakerState,
    Counts,
    Known,
    Transition,
    bucket_start,
    state_doc,
    state_from_doc,
    view,
)
from relayflow.testing.memory import MemoryBreakers

NOW = datetime(2026, 3, 1, 12, 0, 30, tzinfo=UTC)
DEP = "client-api"
POLICY = BreakerPolicy(window_s=30, retry_budget=0.5, min_retries=2)  # buckets of a second


def at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def counts(calls: int, failures: int = 0, first: int = 0, retries: int = 0) -> Counts:
    return Counts(calls=calls, failures=failures, first=first, retries=retries)


def known(shared: dict[int, Counts] | None = None) -> Known:
    return Known(state=BreakerState(DEP), version=None, counts=shared or {}, read_at=NOW)


def test_counts_add_up_with_their_latencies() -> None:
    total = counts(2, failures=1, first=2)
    total.observe(0.01)
    more = counts(3, failures=2, retries=1)
    more.observe(0.01)
    more.observe(60.0)
    total.add(more)
    assert (total.calls, total.failures, total.first, total.retries) == (5, 3, 2, 1)
    assert total.latency[LATENCY_BOUNDS_S.index(0.01)] == 2  # a bound is its bucket's top
    assert total.latency[-1] == 1  # past the last bound: the overflow bucket


def test_p95_is_none_without_calls_and_the_last_bound_when_they_overflow() -> None:
    assert Counts().p95_s() is None
    slow = Counts()
    for _ in range(20):
        slow.observe(120.0)
    assert slow.p95_s() == LATENCY_BOUNDS_S[-1]


def test_counts_round_trip_through_their_document_which_omits_empty_buckets() -> None:
    seen = counts(4, failures=1, first=3, retries=1)
    seen.observe(0.2)
    doc = seen.to_doc()
    assert doc == {"calls": 4, "failures": 1, "first": 3, "retries": 1, "l5": 1}
    assert Counts.from_doc(doc) == seen
    assert Counts.from_doc({}) == Counts()


def test_a_transition_starts_the_state_afresh_and_keeps_a_bounded_trail() -> None:
    state = BreakerState(DEP, probes=(at(10),), probe_ok=2)
    opened = state.to(Breaker.OPEN, NOW, "4 of 5 calls failed", reopen_at=at(10), opened=1)
    assert (opened.state, opened.since, opened.reopen_at, opened.opened) == (
        Breaker.OPEN,
        NOW,
        at(10),
        1,
    )
    assert (opened.probes, opened.probe_ok) == ((), 0)
    assert opened.transitions == (Transition(NOW, Breaker.OPEN, "4 of 5 calls failed"),)
    for i in range(MAX_TRANSITIONS + 5):
        opened = opened.to(Breaker.CLOSED, at(i), f"closed {i}")
    assert len(opened.transitions) == MAX_TRANSITIONS
    assert opened.transitions[-1].why == f"closed {MAX_TRANSITIONS + 4}"  # the newest kept


def test_only_probes_whose_lease_has_not_run_out_are_out() -> None:
    state = BreakerState(DEP, state=Breaker.HALF_OPEN, probes=(at(-1), at(0), at(5)))
    assert state.probes_out(NOW) == (at(5),)


def test_a_breaker_round_trips_through_its_document() -> None:
    state = BreakerState(DEP).to(Breaker.OPEN, NOW, "failing", reopen_at=at(10), opened=2)
    state = BreakerState(
        DEP,
        state=Breaker.HALF_OPEN,
        since=at(10),
        reopen_at=at(10),
        opened=2,
        probes=(at(40),),
        probe_ok=1,
        transitions=state.transitions,
    )
    assert state_from_doc(DEP, state_doc(state)) == state


def test_a_missing_or_unreadable_breaker_document_is_a_closed_breaker() -> None:
    assert state_from_doc(DEP, None) == BreakerState(DEP)
    assert state_from_doc(DEP, {}) == BreakerState(DEP)
    assert state_from_doc(DEP, {"state": "melted"}) == BreakerState(DEP)
    assert state_from_doc(DEP, {"state": "open", "transitions": [{"at": NOW}]}) == BreakerState(DEP)


def test_a_bucket_starts_on_a_multiple_of_its_size() -> None:
    assert bucket_start(POLICY, at(0.7)) == int(NOW.timestamp())
    ten_second_buckets = BreakerPolicy(window_s=300)
    assert bucket_start(ten_second_buckets, at(7)) == int(NOW.timestamp())  # :37 is in :30's


def test_the_window_sums_shared_and_unflushed_buckets_inside_it() -> None:
    now_bucket = bucket_start(POLICY, NOW)
    process = known({now_bucket - 40: counts(9), now_bucket - 10: counts(2, failures=1)})
    process.counting(POLICY, NOW).add(counts(3, failures=3))
    window = process.window(POLICY, NOW, since=None)
    assert (window.calls, window.failures) == (5, 4)  # the bucket 40 s ago is out of it
    # newest first, shared and unflushed of one bucket added together
    process.counts[now_bucket] = counts(1)
    assert [(b, c.calls) for b, c in process.buckets(POLICY, NOW, since=None)] == [
        (now_bucket, 4),
        (now_bucket - 10, 2),
    ]


def test_a_window_since_a_transition_holds_only_the_buckets_that_began_after_it() -> None:
    now_bucket = bucket_start(POLICY, NOW)
    process = known({now_bucket - 10: counts(5, failures=5), now_bucket - 2: counts(1)})
    closed_at = at(-5)
    window = process.window(POLICY, NOW, since=closed_at)
    assert (window.calls, window.failures) == (1, 0)


class Recorded(MemoryBreakers):
    """Memory breakers that note each addition (and can be down)."""

    def __init__(self, *, down: bool = False) -> None:
        super().__init__()
        self.down = down
        self.added: list[tuple[dict[int, Counts], list[int]]] = []

    def add_counts(
        self, dependency: str, shard: int, counts: Mapping[int, Counts], *, drop: Iterable[int]
    ) -> None:
        if self.down:
            raise ConnectionError("Firestore unavailable")
        self.added.append(({b: Counts.from_doc(c.to_doc()) for b, c in counts.items()}, [*drop]))
        super().add_counts(dependency, shard, counts, drop=drop)


def test_what_a_process_counted_is_added_to_the_shared_window_at_most_every_so_often() -> None:
    store, process = Recorded(), known()
    process.counting(POLICY, NOW).add(counts(2, first=2))
    process.flush(store, DEP, 0, POLICY, NOW, every_s=1.0)
    assert [list(added) for added, _ in store.added] == [[bucket_start(POLICY, NOW)]]
    assert process.pending == {} and process.counts[bucket_start(POLICY, NOW)].calls == 2
    process.counting(POLICY, at(0.5)).add(counts(1))
    process.flush(store, DEP, 0, POLICY, at(0.5), every_s=1.0)
    assert len(store.added) == 1  # not due yet: kept
    process.flush(store, DEP, 0, POLICY, at(0.5), every_s=1.0, force=True)
    assert len(store.added) == 2 and process.pending == {}
    process.flush(store, DEP, 0, POLICY, at(5), every_s=1.0)
    assert len(store.added) == 2  # nothing counted since: nothing written


def test_buckets_older_than_two_windows_are_forgotten_when_counts_are_added() -> None:
    store = Recorded()
    old = bucket_start(POLICY, NOW) - 61
    process = known({old: counts(7), old + 40: counts(1)})
    process.counting(POLICY, NOW).add(counts(1))
    process.flush(store, DEP, 0, POLICY, NOW, every_s=1.0)
    assert store.added[0][1] == [old]
    assert old not in process.counts and old + 40 in process.counts


def test_a_failed_addition_keeps_the_counts_for_the_next_one() -> None:
    store, process = Recorded(down=True), known()
    process.counting(POLICY, NOW).add(counts(3, failures=1))
    process.flush(store, DEP, 0, POLICY, NOW, every_s=1.0)  # logged, never raised
    assert process.pending[bucket_start(POLICY, NOW)].calls == 3 and process.counts == {}
    store.down = False
    process.flush(store, DEP, 0, POLICY, NOW, every_s=1.0)
    assert process.counts[bucket_start(POLICY, NOW)].calls == 3 and process.pending == {}


def test_a_view_shows_the_state_the_window_and_the_retry_budget() -> None:
    state = BreakerState(DEP).to(Breaker.OPEN, NOW, "failing", reopen_at=at(10))
    window = counts(10, failures=6, first=8, retries=2)
    window.observe(0.3)
    shown = view(DEP, state, POLICY, window, at(1))
    assert shown == {
        "dependency": DEP,
        "enabled": True,
        "state": "open",
        "since": NOW.isoformat(),
        "reopen_at": at(10).isoformat(),
        "probes_out": 0,
        "probe_ok": 0,
        "window_s": 30.0,
        "calls": 10,
        "failures": 6,
        "failure_rate": 0.6,
        "policy": POLICY.model_dump(),
        "first_attempts": 8,
        "retries": 2,
        "retry_budget": 0.5 * 8 + 2,
        "p95_s": 0.5,
        "transitions": [{"at": NOW.isoformat(), "to": "open", "why": "failing"}],
    }

"""Protecting the services flows call: a circuit breaker and a retry budget per dependency,
shared by every instance, and the latency that adaptive backoff starts from.

A step names what it calls (``ActionStep(..., dependency="client-api")``). Before its handler
runs, the engine asks ``Breakers.check``:

* **closed** — run. A retry (an action's second or later try: a poll after a failed poll is
  the poll its schedule makes anyway) runs only while the dependency's retries stay under its
  budget:
  ``retry_budget`` times the first attempts in the window, plus ``min_retries``; beyond it the retry
  is put off, so an outage never multiplies traffic.
* **open** — do not run and do not fail: the step is put off until the breaker may half-open
  (and no sooner than its own backoff), without spending an attempt. A breaker opens when, over
  ``window_s``, at least ``min_calls`` calls were made and ``failure_rate`` of them failed.
* **half-open** — one call goes through as a probe (its lease written with the half-open
  state); once it succeeds, calls go through again, each a probe, and ``probes`` successes
  close the breaker; one failure opens it again for twice as long (up to ``max_open_s``).
  When it closes, the engine brings forward the steps each instance put off (see
  ``relayflow.core.putoffs``).

The breaker's state is one Firestore document per dependency, written only on transitions and
probes (compare-and-set, so two instances never both make one transition). Outcomes are
counted in memory per process and added (increments, in buckets of ``window_s / 30``, at least
a second) to one of ``shards`` window documents per dependency (``RELAYFLOW_BREAKER_SHARDS``,
4), each instance to the one it picked at random. Each instance reads the state and every
shard at most once a second (``refresh_s``), and only while it calls; it judges by what it
read plus what it counted itself and has not added yet.

**Paced flushes: a window document's write rate does not grow with the fleet.** Firestore
sustains about one write a second to one document
(https://firebase.google.com/docs/firestore/best-practices#hotspots, "Updates to a single
document"; the quotas page, https://firebase.google.com/docs/firestore/quotas, once stated
"1 per second"); relayflow designs at most 70 % of it. With a fixed flush every second, a shard
took instances / shards writes a second: at the ~630 worker and poller instances 10,000
reference flows/s need (relayflow.capacity.model), 157/s, which capped the system at ~64
flows/s. Now every addition also counts itself in the bucket it is made in (``flushes``, and
``interval_ms``: the interval its instance keeps), and an instance reading its shard estimates
how many instances write it: each addition at interval T stands for T seconds of one instance,
so the intervals summed over the last window, divided by its span, are the writers N
(``breaker_state.writers``: a direct estimate, right whatever intervals the others keep and
however they just changed them, so the instances do not chase each other's lag and
oscillate). It then flushes every ``clamp(N / TARGET_WRITES_PER_S, flush_s, MAX_FLUSH_S)``:
the N instances sharing a shard write it ``TARGET_WRITES_PER_S`` = 0.5 times a second together,
whatever N is. One instance alone flushes every ``flush_s`` = 2 s (``FLUSH_S = 1 /
TARGET_WRITES_PER_S``: at the old 1 s a lone instance would write 1/s, over the 70 %; a
shorter ``flush_s`` given is stretched to it by the same rule).
A fleet shrinking back is seen within a window (the others' additions leave it); one that
joins a crowded shard starts at a random point of its interval, so scaling out is no burst.
Measured on a fake clock (tests/unit/test_breaker_flushes.py): 1, 2, 10, 100 and 400 instances
on one shard write it 0.50, 0.51, 0.53, 0.52-0.56 and 0.53-0.56 times a second once settled,
at most 0.62 while 400 settle from a cold start; ``MAX_FLUSH_S`` = 3,600 s keeps that bound up
to 1,800 instances a shard (7,200 at 4 shards), past which a shard takes N / 3,600.

What a long interval changes, and why it is sound: an instance flushing less than once a
window adds only what it counted in the last window (older buckets are forgotten unshared), so
at large fleets the shared window is a *sample* of the fleet's calls: about
``TARGET_WRITES_PER_S x window_s x shards`` additions (60 at the defaults), each an instance's
own recent calls, at whatever fleet size. The breaker judges a ratio (``failure_rate`` of the
newest stretch holding ``min_calls``), the budget another (retries against first attempts),
p95 a quantile: a sample of whole instances estimates each, and every instance adds its own
unflushed calls, so one that sees a failing dependency itself opens the breaker for all. What
the sample loses is volume: ``calls`` in a view (api, CLI) count the sample, not the fleet, at
large fleets, and ``min_retries`` (an absolute allowance) is granted per instance's view rather
than once for the fleet (negligible next to ``retry_budget x first attempts`` at any rate that
paces flushes). Where no instance alone reaches ``min_calls`` (200 instances calling once
every 5 s each) the breaker still opens within the window: in 8 s, the shards staying at
0.5 writes/s through the outage (the same tests).

The interval is not capped at a fraction of the window (``window_s / 3`` was proposed): a 10 s
cap puts N / 10 writes a second on a shard again once N passes 5 (15.7/s at 157 writers), so
shards would have to grow with the fleet. They do not: the write rate no longer needs them to,
and each costs every calling instance a read a second (with 4 shards, 630 instances read 3,150
documents a second per dependency called; at 126 shards, what a 10 s cap on the interval would
have needed, it would be ~80,000). More shards only widen the sample. The breaker's state
document is read by every calling instance once a second and written only on transitions and
probes.

The policies are configured in ``relayflow.core.breaker_policy``; the stored state, the counts
and their store are ``relayflow.core.breaker_state``.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from relayflow.core.backoff import compute_delay, unit_interval
from relayflow.core.breaker_policy import BreakerPolicy, Dependencies
from relayflow.core.breaker_state import (
    TARGET_WRITES_PER_S,
    Breaker,
    BreakerState,
    BreakerStore,
    Counts,
    Known,
    flush_interval_s,
    view,
)
from relayflow.core.clock import Clock
from relayflow.core.metrics import BreakerMetrics

log = logging.getLogger("relayflow.dependencies")
# The shortest flush interval: one instance alone writes its shard at the target rate.
FLUSH_S = 1.0 / TARGET_WRITES_PER_S


@dataclass(frozen=True)
class Verdict:
    """Whether a step that calls ``dependency`` may run now; if not, until when it waits."""

    dependency: str
    run: bool = True
    until: datetime | None = None
    reason: str = ""  # why it waits: "open", "half_open" or "budget"
    detail: str = ""
    probe: bool = False  # it runs as one of the half-open breaker's probes
    retry: bool = False


class Breakers:
    """Every dependency's breaker and budget, as one process sees and changes them."""

    def __init__(
        self,
        store: BreakerStore,
        policies: Dependencies,
        clock: Clock,
        *,
        shards: int = 4,
        refresh_s: float = 1.0,
        flush_s: float = FLUSH_S,
        metrics: BreakerMetrics | None = None,
        shard: int | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._store = store
        self._policies = policies
        self._clock = clock
        if shards < 1 or flush_s <= 0:
            raise ValueError(f"breakers need shards >= 1 and flush_s > 0, not {shards}, {flush_s}")
        self._shards = shards
        self._random = rng or random.Random()
        # One shard per process, picked at random: instances spread their writes.
        self._shard = self._random.randrange(shards) if shard is None else shard % shards
        self._refresh_s = refresh_s
        self._flush_s = flush_s
        self._metrics = metrics
        self._known: dict[str, Known] = {}
        # Breakers another instance closed, seen here since closed_elsewhere() last asked.
        self._closings: set[str] = set()
        self._lock = threading.Lock()

    @property
    def policies(self) -> Dependencies:
        return self._policies

    def check(
        self,
        dependency: str,
        *,
        retry: bool,
        deferrals: int = 0,
        key: str = "",
        natural_s: float = 0.0,
    ) -> Verdict:
        """May a step calling ``dependency`` run now? ``retry``: it is a retry (its budget
        applies); ``deferrals``: how often it was put off already (its own backoff grows);
        ``natural_s``: how long the step would wait before its next try anyway (its poll or
        retry curve), the least it is put off for, so putting a step off never makes it come
        back more often than it would have called."""
        policy = self._policies.policy(dependency)
        now = self._clock.now()
        with self._lock:
            known = self._fresh(dependency, now)
            if not policy.enabled:
                self._count(known, now, retry=retry)
                return Verdict(dependency, retry=retry)
            verdict = self._decide(dependency, known, policy, now, retry, deferrals, key, natural_s)
            if verdict.run:
                self._count(known, now, retry=retry)
        if not verdict.run and self._metrics:
            self._metrics.dependency_deferred(dependency, verdict.reason)
        return verdict

    def ready(self, dependency: str) -> Verdict:
        """Whether more calls to ``dependency`` are welcome now, asking only (no call counted,
        no probe taken): not while its breaker is open (until it may probe) or half-open, nor
        while its retry budget is spent (it is failing calls already). What a bulk action asks
        before each batch of flows that call it; each flow's own calls still ask ``check``."""
        policy = self._policies.policy(dependency)
        now = self._clock.now()
        with self._lock:
            known = self._fresh(dependency, now)
            state = known.state
            if not policy.enabled:
                return Verdict(dependency)
            soon = now + timedelta(seconds=max(1.0, policy.bucket_s))
            # Open past its time, it waits for a call to probe it: the flows let in now are
            # those calls (the first probes, the others are put off by their own check), or
            # nothing would ever probe a dependency that every flow gave up on.
            due = state.reopen_at is not None and now >= state.reopen_at
            if state.state is Breaker.OPEN and not due:
                until = max(state.reopen_at or soon, soon)
                detail = f"{dependency}'s breaker is open"
                return Verdict(dependency, False, until, "open", detail)
            if state.state is Breaker.HALF_OPEN:
                detail = f"{dependency}'s breaker is half-open: its probes decide"
                return Verdict(dependency, False, soon, "half_open", detail)
            if not self._within_budget(known, policy, now):
                detail = f"{dependency}'s retry budget is spent"
                return Verdict(dependency, False, soon, "budget", detail)
        return Verdict(dependency)

    def _decide(
        self,
        dependency: str,
        known: Known,
        policy: BreakerPolicy,
        now: datetime,
        retry: bool,
        deferrals: int,
        key: str,
        natural_s: float,
    ) -> Verdict:
        backoff_s = compute_delay(
            n=deferrals,
            initial_s=min(1.0, policy.max_defer_s),
            multiplier=2.0,
            max_interval_s=policy.max_defer_s,
            key=f"{key}:defer",
        )
        natural = now + timedelta(seconds=min(natural_s, policy.max_defer_s))
        state = known.state
        if state.state is Breaker.OPEN and state.reopen_at is not None and now >= state.reopen_at:
            if self._half_open(known, policy, now):
                return Verdict(dependency, probe=True, retry=retry)  # the first probe: ours
            state = known.state  # what a rival made it meanwhile
        # A step put off comes back when it would have tried again anyway (its poll or retry
        # curve), never sooner: coming back sooner to catch the probes would make an outage
        # cost more requests and writes than it costs with no breaker at all. Steps put off
        # since the breaker last opened are brought forward when it closes (the engine's
        # bring-forward), so none waits out a whole try after the dependency is back.
        if state.state is Breaker.OPEN:
            assert state.reopen_at is not None
            # Not before the breaker may half-open (spread over its open time, so the steps
            # put off do not all come back in the same second).
            u = unit_interval(f"{key}:{deferrals}:spread")
            until = max(state.reopen_at + timedelta(seconds=u * policy.open_s), natural)
            detail = f"{dependency}'s breaker is open until {_hms(state.reopen_at)}"
            return Verdict(dependency, False, until, "open", detail, retry=retry)
        if state.state is Breaker.HALF_OPEN:
            if self._take_probe(known, policy, now):
                return Verdict(dependency, probe=True, retry=retry)
            # The probes decide within a call's time; at least a second, so a step with no
            # curve of its own does not spin.
            soon_s = min(0.5 + unit_interval(f"{key}:{deferrals}:soon"), policy.open_s)
            until = max(now + timedelta(seconds=soon_s), natural)
            detail = f"{dependency}'s breaker is half-open and its probes are out"
            return Verdict(dependency, False, until, "half_open", detail, retry=retry)
        if retry and not self._within_budget(known, policy, now):
            later = max(now + timedelta(seconds=backoff_s), natural)
            detail = f"{dependency}'s retry budget is spent"
            return Verdict(dependency, False, later, "budget", detail, retry=retry)
        return Verdict(dependency, retry=retry)

    def _within_budget(self, known: Known, policy: BreakerPolicy, now: datetime) -> bool:
        window = known.window(policy, now, since=None)
        return window.retries < policy.retry_budget * window.first + policy.min_retries

    def _half_open(self, known: Known, policy: BreakerPolicy, now: datetime) -> bool:
        """The open breaker's time is up: half-open it with this caller's call as the first
        probe, in one write (a round of an outage costs the document two writes: this one and
        the probe's failure). Whether it did; if a rival did, ``known`` holds what it wrote."""
        lease = now + timedelta(seconds=policy.probe_lease_s)
        wanted = known.state.to(Breaker.HALF_OPEN, now, "open time over: probing")
        return self._transition(known, replace(wanted, probes=(lease,)), now)

    def _take_probe(self, known: Known, policy: BreakerPolicy, now: datetime) -> bool:
        for _ in range(3):  # a rival's probe or transition: look again, a few times
            state = known.state
            if state.state is not Breaker.HALF_OPEN:
                return state.state is Breaker.CLOSED
            if state.probe_ok:
                # A probe succeeded: the dependency answers again. Calls go through, each a
                # probe, until ``probes`` have succeeded (closed) or one fails (open again):
                # a step put off now would cost a request more, and come back only once it
                # closes.
                return True
            if state.probes_out(now):
                return False  # the first probe alone: a dependency still down costs one call
            # No live lease: the first probe's instance died before its outcome; probe again.
            lease = now + timedelta(seconds=policy.probe_lease_s)
            if self._put(known, replace(state, probes=(lease,)), now):
                return True
            self._reread(known, now)
        return False

    def record(self, verdict: Verdict, *, ok: bool, latency_s: float) -> bool:
        """Count what the call did; open, close or re-open the breaker as that decides.
        Whether this call closed it (the steps put off may then be brought forward)."""
        dependency = verdict.dependency
        closed = False
        policy = self._policies.policy(dependency)
        now = self._clock.now()
        with self._lock:
            known = self._fresh(dependency, now)
            bucket = known.counting(policy, now)
            bucket.calls += 1
            bucket.failures += 0 if ok else 1
            bucket.observe(latency_s)
            if policy.enabled:
                if verdict.probe:
                    closed = self._probed(known, policy, now, ok)
                elif not ok and known.state.state is Breaker.CLOSED:
                    self._maybe_open(known, policy, now)
            every_s = known.interval_s
            known.flush(self._store, dependency, self._shard, policy, now, every_s=every_s)
        if self._metrics:
            self._metrics.dependency_called(dependency, ok)
        return closed

    def _probed(self, known: Known, policy: BreakerPolicy, now: datetime, ok: bool) -> bool:
        """Count a probe's outcome; whether it closed the breaker."""
        for _ in range(3):
            state = known.state
            if state.state is not Breaker.HALF_OPEN:
                return False  # someone else decided already
            if not ok:
                opened = state.opened + 1
                reopen = now + timedelta(seconds=policy.open_for_s(opened))
                wanted = state.to(
                    Breaker.OPEN, now, "a probe failed", reopen_at=reopen, opened=opened
                )
            elif state.probe_ok + 1 >= policy.probes:
                wanted = state.to(
                    Breaker.CLOSED, now, f"{policy.probes} probes succeeded", opened=0
                )
            else:
                out = state.probes_out(now)
                wanted = replace(state, probe_ok=state.probe_ok + 1, probes=out[1:])
            if self._transition(known, wanted, now):
                return wanted.state is Breaker.CLOSED
        return False

    def _maybe_open(self, known: Known, policy: BreakerPolicy, now: datetime) -> None:
        """Open if, over the newest stretch of the window holding at least ``min_calls``
        calls (the last second, the last two, … the whole window), ``failure_rate`` failed."""
        calls = failures = 0
        oldest = now.timestamp()
        for start, counts in known.buckets(policy, now, since=known.state.since):
            calls, failures = calls + counts.calls, failures + counts.failures
            oldest = start
            if calls >= policy.min_calls and failures >= policy.failure_rate * calls:
                break
        else:
            return
        span = max(policy.bucket_s, now.timestamp() - oldest)
        why = f"{failures} of {calls} calls failed in {span:.0f}s (≥ {policy.failure_rate:.0%})"
        opened = known.state.opened + 1
        reopen = now + timedelta(seconds=policy.open_for_s(opened))
        wanted = known.state.to(Breaker.OPEN, now, why, reopen_at=reopen, opened=opened)
        self._transition(known, wanted, now)

    def p95_s(self, dependency: str) -> float | None:
        """The dependency's p95 latency over its window, as last read (None: no calls)."""
        policy = self._policies.policy(dependency)
        now = self._clock.now()
        with self._lock:
            known = self._known.get(dependency)
            if known is None:
                return None
            return known.window(policy, now, since=None).p95_s()

    def flush_interval_s(self, dependency: str) -> float:
        """How often this process adds what it counts of ``dependency`` to its window shard,
        as its last read of the shard's writers set it (``flush_s`` before any)."""
        with self._lock:
            known = self._known.get(dependency)
            return known.interval_s if known is not None else self._flush_s

    def closed_elsewhere(self) -> list[str]:
        """The dependencies whose breaker this process saw another instance close since it
        last asked (each once): what it put off for them may come forward."""
        with self._lock:
            found, self._closings = sorted(self._closings), set()
        return found

    def last_opened(self, dependency: str) -> datetime | None:
        """When the breaker of ``dependency`` last opened, as this process knows it (None if
        its transitions do not say): once it has closed, steps put off since then were put off
        while the dependency may already have been back."""
        with self._lock:
            known = self._known.get(dependency)
            transitions = known.state.transitions if known is not None else ()
        opened = [t.at for t in transitions if t.to is Breaker.OPEN]
        return opened[-1] if opened else None

    def views(self, *, named: Iterable[str] = ()) -> list[dict[str, Any]]:
        """Every breaker known (``named``, e.g. by the flows' steps; stored; configured; or
        called here): state and window."""
        now = self._clock.now()
        names = {s.dependency for s in self._store.breakers()} | set(named)
        names |= set(self._policies.dependencies) | set(self._known)
        shown = []
        for name in sorted(names):
            policy = self._policies.policy(name)
            with self._lock:
                known = self._fresh(name, now, force=True)
                window = known.window(policy, now, since=None)
            shown.append(view(name, known.state, policy, window, now))
        return shown

    def flush(self) -> None:
        """Add what this process counted to the shared window now (e.g. before it stops)."""
        now = self._clock.now()
        with self._lock:
            for dependency, known in self._known.items():
                policy, every_s = self._policies.policy(dependency), known.interval_s
                known.flush(
                    self._store, dependency, self._shard, policy, now, every_s=every_s, force=True
                )

    def _fresh(self, dependency: str, now: datetime, *, force: bool = False) -> Known:
        known = self._known.get(dependency)
        stale = known is None or (now - known.read_at).total_seconds() >= self._refresh_s
        if known is None or stale or force:
            state, version = self._store.breaker(dependency)
            shards = self._store.shard_counts(dependency, self._shards)
            counts = _summed(shards)
            if known is None:
                known = Known(_default(state, dependency), version, counts, now)
                known.interval_s = self._flush_s
                self._known[dependency] = known
            else:
                self._seen(known, state)
                known.state, known.version = state, version
                known.counts, known.read_at = counts, now
            self._pace(known, shards[self._shard], now)
        return known

    def _pace(self, known: Known, shard: dict[int, Counts], now: datetime) -> None:
        """Set how often this process adds to its shard from how many write it (see the module
        docstring). One that joins a crowded shard starts at a random point of its interval,
        so a fleet scaling out does not write every shard at once."""
        policy = self._policies.policy(known.state.dependency)
        known.interval_s = flush_interval_s(shard, policy, now, flush_s=self._flush_s)
        if known.flushed_at is None and known.interval_s > self._flush_s:
            phase_s = self._random.random() * known.interval_s
            known.flushed_at = now - timedelta(seconds=phase_s)

    def _reread(self, known: Known, now: datetime) -> None:
        state, version = self._store.breaker(known.state.dependency)
        self._seen(known, state)
        known.state, known.version = _default(state, known.state.dependency), version

    def _seen(self, known: Known, state: BreakerState) -> None:
        """What the store holds, read over what this process knew (which it replaces)."""
        if state.state is known.state.state:
            return
        if state.state is Breaker.CLOSED:
            self._closings.add(state.dependency)
        if self._metrics:
            self._metrics.breaker_state(state.dependency, state.state.value)

    def _transition(self, known: Known, wanted: BreakerState, now: datetime) -> bool:
        """Write ``wanted`` over what was read; on a rival's write, read what it wrote."""
        before = known.state.state
        if self._put(known, wanted, now):
            if wanted.state is not before:
                log.warning(
                    "breaker %s",
                    wanted.state.value,
                    extra={"dependency": wanted.dependency, "why": wanted.transitions[-1].why},
                )
                if self._metrics:
                    self._metrics.breaker_changed(wanted.dependency, wanted.state.value)
                    self._metrics.breaker_state(wanted.dependency, wanted.state.value)
            return True
        self._reread(known, now)
        return False

    def _put(self, known: Known, wanted: BreakerState, now: datetime) -> bool:
        written, version = self._store.put_breaker(wanted, version=known.version)
        if written:
            known.state, known.version = wanted, version
        return written

    def _count(self, known: Known, now: datetime, *, retry: bool) -> None:
        policy = self._policies.policy(known.state.dependency)
        bucket = known.counting(policy, now)
        if retry:
            bucket.retries += 1
        else:
            bucket.first += 1


def _summed(shards: Iterable[dict[int, Counts]]) -> dict[int, Counts]:
    total: dict[int, Counts] = {}
    for shard in shards:
        for bucket, counts in shard.items():
            total.setdefault(bucket, Counts()).add(counts)
    return total


def _default(state: BreakerState, dependency: str) -> BreakerState:
    return state if state.dependency else BreakerState(dependency)


def _hms(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%H:%M:%S")

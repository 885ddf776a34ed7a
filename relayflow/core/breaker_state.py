"""A dependency's breaker as stored and as one process knows it: the state and its transitions
(one document per dependency), the window's counts (in shards of buckets), the port they are
kept behind (``relayflow.gcp.breakers`` in Firestore; memory in tests), and what a process last
read of them with what it counted since (added to the shared window every flush interval).

Each addition to a window document also counts itself in the bucket it was made in
(``flushes``, and ``interval_ms``: the interval the instance was flushing at), so whoever reads
a shard knows how many instances write it (``writers``) and stretches its own interval to keep
the document near ``TARGET_WRITES_PER_S`` (``flush_interval_s``; the design and its figures are
in ``relayflow.core.breakers``).
"""

from __future__ import annotations

import logging
import math
import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from relayflow.core.breaker_policy import BUCKETS_PER_WINDOW, BreakerPolicy

log = logging.getLogger("relayflow.dependencies")

# Writes a second one window document is kept near, whatever the fleet's size: under 70 % of
# Firestore's sustained rate of about one write a second to a document (relayflow.capacity.limits
# FIRESTORE_DOCUMENT; https://firebase.google.com/docs/firestore/best-practices#hotspots and
# https://firebase.google.com/docs/firestore/quotas), with room for the estimate's noise
# (relayflow.core.breakers: 0.50-0.56/s measured once settled, tests/unit/test_breaker_flushes.py).
TARGET_WRITES_PER_S = 0.5
# The most one paced window document takes once its writers settled, as
# tests/unit/test_breaker_flushes.py holds it (the estimate's noise over TARGET_WRITES_PER_S):
# what the capacity model charges each document (relayflow.capacity.model).
SETTLED_WRITES_PER_S = 0.6
# The longest an instance waits between flushes. Past window_s its counts reach the window as a
# sample (what it counted in the last window); this bound only caps the fleet a shard can take at
# TARGET_WRITES_PER_S (MAX_FLUSH_S x TARGET_WRITES_PER_S = 1,800 instances per shard).
MAX_FLUSH_S = 3600.0
# Latency histogram bounds (seconds) for p95: what adaptive backoff starts from.
LATENCY_BOUNDS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
LATENCY_KEYS = tuple(f"l{i}" for i in range(len(LATENCY_BOUNDS_S) + 1))
MAX_TRANSITIONS = 20  # kept on the breaker's document, newest last


class Breaker(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True)
class Transition:
    at: datetime
    to: Breaker
    why: str


@dataclass(frozen=True)
class BreakerState:
    """A dependency's breaker, as stored (one document per dependency)."""

    dependency: str
    state: Breaker = Breaker.CLOSED
    since: datetime | None = None  # entered this state: the window counts from here
    reopen_at: datetime | None = None  # open: when probes may start
    opened: int = 0  # opens in a row, each twice as long as the last
    probes: tuple[datetime, ...] = ()  # half-open: the leases of probes out
    probe_ok: int = 0
    transitions: tuple[Transition, ...] = ()

    def to(self, state: Breaker, now: datetime, why: str, **changes: Any) -> BreakerState:
        trail = (*self.transitions, Transition(now, state, why))[-MAX_TRANSITIONS:]
        return replace(
            self, state=state, since=now, probes=(), probe_ok=0, transitions=trail, **changes
        )

    def probes_out(self, now: datetime) -> tuple[datetime, ...]:
        return tuple(lease for lease in self.probes if lease > now)


@dataclass
class Counts:
    """What a dependency saw in one time bucket: calls and failures (for the breaker), first
    attempts and retries (for the budget), and a latency histogram (for p95)."""

    calls: int = 0
    failures: int = 0
    first: int = 0
    retries: int = 0
    latency: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BOUNDS_S) + 1))
    # The window document's own bookkeeping: additions made in this bucket, and the sum of the
    # flush intervals (ms) their instances were keeping. Not calls: only ``writers`` reads them.
    flushes: int = 0
    interval_ms: int = 0

    def add(self, other: Counts) -> None:
        self.calls += other.calls
        self.failures += other.failures
        self.first += other.first
        self.retries += other.retries
        self.flushes += other.flushes
        self.interval_ms += other.interval_ms
        self.latency = list(map(operator.add, self.latency, other.latency))

    def observe(self, latency_s: float) -> None:
        index = next((i for i, b in enumerate(LATENCY_BOUNDS_S) if latency_s <= b), None)
        self.latency[len(LATENCY_BOUNDS_S) if index is None else index] += 1

    def p95_s(self) -> float | None:
        """The upper bound of the latency bucket holding the 95th percentile."""
        total = sum(self.latency)
        if total == 0:
            return None
        seen = 0
        for index, count in enumerate(self.latency):
            seen += count
            if seen >= math.ceil(0.95 * total):
                return LATENCY_BOUNDS_S[min(index, len(LATENCY_BOUNDS_S) - 1)]
        return LATENCY_BOUNDS_S[-1]

    def to_doc(self) -> dict[str, int]:
        doc = {"calls": self.calls, "failures": self.failures}
        doc |= {"first": self.first, "retries": self.retries}
        paced = {"flushes": self.flushes, "interval_ms": self.interval_ms}
        doc |= {k: n for k, n in paced.items() if n}  # only where additions were made
        return doc | {f"l{i}": n for i, n in enumerate(self.latency) if n}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> Counts:
        counts = cls(
            calls=int(doc.get("calls", 0)),
            failures=int(doc.get("failures", 0)),
            first=int(doc.get("first", 0)),
            retries=int(doc.get("retries", 0)),
            flushes=int(doc.get("flushes", 0)),
            interval_ms=int(doc.get("interval_ms", 0)),
        )
        counts.latency = [int(doc.get(key, 0)) for key in LATENCY_KEYS]
        return counts


class BreakerStore(Protocol):
    """Where breakers and their window counts live (Firestore; memory in tests)."""

    def breaker(self, dependency: str) -> tuple[BreakerState, object | None]:
        """The breaker and a version for ``put_breaker`` (None: never written)."""
        ...

    def put_breaker(
        self, state: BreakerState, *, version: object | None
    ) -> tuple[bool, object | None]:
        """Write ``state`` if the breaker is still at ``version``: whether it was, and the
        version written."""
        ...

    def add_counts(
        self, dependency: str, shard: int, counts: Mapping[int, Counts], *, drop: Iterable[int]
    ) -> None:
        """Add ``counts`` (by bucket start, epoch seconds) to one shard; forget ``drop``."""
        ...

    def counts(self, dependency: str, shards: int) -> dict[int, Counts]:
        """Every shard's counts, summed by bucket."""
        ...

    def shard_counts(self, dependency: str, shards: int) -> list[dict[int, Counts]]:
        """Each shard's counts by bucket (shard k at index k), in one read of them all."""
        ...

    def breakers(self) -> list[BreakerState]:
        """Every breaker written so far."""
        ...


def state_doc(state: BreakerState) -> dict[str, Any]:
    """A breaker as its stored document."""
    return {
        "dependency": state.dependency,
        "state": state.state.value,
        "since": state.since,
        "reopen_at": state.reopen_at,
        "opened": state.opened,
        "probes": list(state.probes),
        "probe_ok": state.probe_ok,
        "transitions": [{"at": t.at, "to": t.to.value, "why": t.why} for t in state.transitions],
    }


def state_from_doc(dependency: str, doc: Mapping[str, Any] | None) -> BreakerState:
    """A stored breaker; closed if there is none (or it does not parse: a breaker is advice,
    and a closed one is what a fresh deployment has)."""
    if not doc:
        return BreakerState(dependency)
    try:
        return BreakerState(
            dependency=dependency,
            state=Breaker(doc.get("state", "closed")),
            since=doc.get("since"),
            reopen_at=doc.get("reopen_at"),
            opened=int(doc.get("opened", 0)),
            probes=tuple(doc.get("probes") or ()),
            probe_ok=int(doc.get("probe_ok", 0)),
            transitions=tuple(
                Transition(t["at"], Breaker(t["to"]), str(t.get("why", "")))
                for t in doc.get("transitions") or ()
            ),
        )
    except (KeyError, TypeError, ValueError):
        log.error("unreadable breaker document", extra={"dependency": dependency})
        return BreakerState(dependency)


@dataclass
class Known:
    """What this process last read of one dependency, and what it counted since."""

    state: BreakerState
    version: object | None
    counts: dict[int, Counts]
    read_at: datetime
    pending: dict[int, Counts] = field(default_factory=dict)
    flushed_at: datetime | None = None
    # How often this process adds to its shard, as the shard's writers last read ask
    # (``flush_interval_s``); the Breakers' flush_s until then.
    interval_s: float = 1.0 / TARGET_WRITES_PER_S

    def counting(self, policy: BreakerPolicy, now: datetime) -> Counts:
        """The bucket ``now``'s calls are counted in, not yet added to the shared window."""
        return self.pending.setdefault(bucket_start(policy, now), Counts())

    def window(self, policy: BreakerPolicy, now: datetime, *, since: datetime | None) -> Counts:
        """Counts over the window (from ``since``, if later), shared and not yet flushed."""
        total = Counts()
        for _, counts in self.buckets(policy, now, since=since):
            total.add(counts)
        return total

    def buckets(
        self, policy: BreakerPolicy, now: datetime, *, since: datetime | None
    ) -> list[tuple[int, Counts]]:
        """The window's buckets, newest first, shared and not yet flushed added together.

        With ``since``, only buckets that began after it: a bucket that began before holds
        calls of the state before, so a breaker just closed starts clean."""
        start = now.timestamp() - policy.window_s
        if since is not None:
            start = max(start, since.timestamp())
        else:
            start -= policy.bucket_s  # the oldest, partly in the window, counts whole
        merged: dict[int, Counts] = {}
        for source in (self.counts, self.pending):
            for bucket, counts in source.items():
                if bucket >= start:
                    merged.setdefault(bucket, Counts()).add(counts)
        return sorted(merged.items(), reverse=True)

    def flush(
        self,
        store: BreakerStore,
        dependency: str,
        shard: int,
        policy: BreakerPolicy,
        now: datetime,
        *,
        every_s: float,
        force: bool = False,
    ) -> None:
        """Add what was counted here in the last window to ``shard`` of the shared window, at
        most every ``every_s`` (``force``: now), with this addition itself counted (so readers
        know how many write the shard), and forget buckets older than two windows."""
        due = self.flushed_at is None or (now - self.flushed_at).total_seconds() >= every_s
        if not (due or force):
            self.forget_old(policy, now)
            return
        self.forget_old(policy, now, always=True)
        if not self.pending:
            return
        oldest = now.timestamp() - 2 * policy.window_s
        drop = [b for b in self.counts if b < oldest]
        added = dict(self.pending)
        mark = Counts(flushes=1, interval_ms=round(every_s * 1000))
        added[bucket_start(policy, now)] = _plus(added.get(bucket_start(policy, now)), mark)
        try:
            store.add_counts(dependency, shard, added, drop=drop)
        except Exception:  # the window is advice: a failed flush must not fail the step
            log.warning("could not add to a breaker window", exc_info=True)
            return
        for bucket, counts in added.items():
            self.counts.setdefault(bucket, Counts()).add(counts)
        for bucket in drop:
            self.counts.pop(bucket, None)
        self.pending = {}
        self.flushed_at = now

    def forget_old(self, policy: BreakerPolicy, now: datetime, *, always: bool = False) -> None:
        """Drop unflushed buckets the window no longer holds: an instance flushing less often
        than once a window shares only its last window (the shared window is then a sample).
        Between flushes only once they could fill more than a window (memory stays bounded
        without a look at every call)."""
        if not always and len(self.pending) <= BUCKETS_PER_WINDOW + 1:
            return
        start = now.timestamp() - policy.window_s - policy.bucket_s
        self.pending = {b: c for b, c in self.pending.items() if b >= start}


def _plus(counts: Counts | None, more: Counts) -> Counts:
    total = Counts()
    for part in (counts, more):
        if part is not None:
            total.add(part)
    return total


def writers(shard: Mapping[int, Counts], policy: BreakerPolicy, now: datetime) -> float:
    """How many instances write one window document, from the flushes it counted over the last
    window: each addition made at interval T stands for T seconds of one instance, so the sum of
    the intervals over the span is the instances writing it (whatever intervals they keep, and
    however those changed meanwhile: no feedback lag to oscillate on)."""
    newest = bucket_start(policy, now)
    lowest = newest - (math.ceil(policy.window_s / policy.bucket_s) - 1) * policy.bucket_s
    span_s = max(policy.bucket_s, now.timestamp() - lowest)
    covered_ms = sum(c.interval_ms for b, c in shard.items() if lowest <= b <= newest)
    return covered_ms / 1000.0 / span_s


def flush_interval_s(
    shard: Mapping[int, Counts],
    policy: BreakerPolicy,
    now: datetime,
    *,
    flush_s: float,
    target_per_s: float = TARGET_WRITES_PER_S,
    max_s: float = MAX_FLUSH_S,
) -> float:
    """The interval this instance flushes to ``shard`` at: so that its ``writers`` together
    write it about ``target_per_s`` times a second; ``flush_s`` while they are few."""
    wanted = writers(shard, policy, now) / target_per_s
    return min(max(flush_s, wanted), max(flush_s, max_s))


def bucket_start(policy: BreakerPolicy, now: datetime) -> int:
    """The start (epoch seconds) of the bucket ``now`` falls in."""
    size = policy.bucket_s
    return int(now.timestamp() // size * size)


def view(
    dependency: str, state: BreakerState, policy: BreakerPolicy, window: Counts, now: datetime
) -> dict[str, Any]:
    """A breaker as the api and the CLI show it: its state, its window and its budget, and the
    policy that judges them (``failure_rate`` is the window's; ``policy.failure_rate`` opens it)."""
    return {
        "dependency": dependency,
        "enabled": policy.enabled,
        "policy": policy.model_dump(),
        "state": state.state.value,
        "since": _iso(state.since),
        "reopen_at": _iso(state.reopen_at),
        "probes_out": len(state.probes_out(now)),
        "probe_ok": state.probe_ok,
        "window_s": policy.window_s,
        "calls": window.calls,
        "failures": window.failures,
        "failure_rate": round(window.failures / window.calls, 4) if window.calls else None,
        "first_attempts": window.first,
        "retries": window.retries,
        "retry_budget": policy.retry_budget * window.first + policy.min_retries,
        "p95_s": window.p95_s(),
        "transitions": [
            {"at": _iso(t.at), "to": t.to.value, "why": t.why} for t in state.transitions
        ],
    }


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at else None

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
counted in memory per process and added about once a second to one of ``shards`` window
documents per dependency (increments, in buckets of ``window_s / 30``, at least a second), so
however many calls a second the dependency takes, each document takes about one write a second
per instance sharing it.
Each instance reads the state and the shards at most once a second, and only while it calls.
"""

from __future__ import annotations

import logging
import math
import random
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from relayflow.core.backoff import compute_delay, unit_interval
from relayflow.core.clock import Clock
from relayflow.core.errors import ConfigError

log = logging.getLogger("relayflow.dependencies")

DEPENDENCY_PATTERN = r"^[a-z][a-z0-9-]{0,62}$"
# Latency histogram bounds (seconds) for p95: what adaptive backoff starts from.
LATENCY_BOUNDS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# The window is counted in buckets of a second (more for windows over 30 s): a breaker
# judges the newest buckets first, so it reacts within a second or two of an outage however
# many successes the rest of the window holds.
BUCKETS_PER_WINDOW = 30
MAX_TRANSITIONS = 20  # kept on the breaker's document, newest last


class BreakerPolicy(BaseModel):
    """One dependency's breaker and retry budget."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    window_s: float = Field(default=30.0, ge=5.0, le=3600.0)
    min_calls: int = Field(default=20, ge=1, le=100_000)
    failure_rate: float = Field(default=0.5, gt=0.0, le=1.0)
    # Open for ``open_s``, doubling after each failed probe up to ``max_open_s`` (by default
    # not at all). A round of probes while the dependency is still down is one call (the
    # first probe goes alone) and two writes of the breaker's document, so probing every
    # second costs the dependency 60 calls a minute however many flows wait. How long the
    # breaker stays open bounds how soon after the dependency's return the flows go on: half
    # of ``open_s`` on average (measured by bench/outage.py: the flows due meanwhile are put
    # off and brought forward, and on a busy stack that time is lost to recovery).
    open_s: float = Field(default=1.0, gt=0.0, le=3600.0)
    max_open_s: float = Field(default=1.0, gt=0.0, le=3600.0)
    probes: int = Field(default=3, ge=1, le=100)
    # A probe whose outcome never came (its instance died) stops counting after this long.
    probe_lease_s: float = Field(default=30.0, gt=0.0, le=3600.0)
    retry_budget: float = Field(default=0.2, ge=0.0, le=10.0)
    min_retries: int = Field(default=10, ge=0, le=100_000)
    # The longest a put-off step waits before it looks again (its own backoff grows to this).
    max_defer_s: float = Field(default=30.0, ge=1.0, le=3600.0)

    @property
    def bucket_s(self) -> float:
        return max(1.0, self.window_s / BUCKETS_PER_WINDOW)

    def open_for_s(self, opened: int) -> float:
        """How long the breaker stays open the ``opened``-th time in a row (1 = the first)."""
        doubled: float = self.open_s * 2.0 ** max(0, opened - 1)
        return min(doubled, max(self.max_open_s, self.open_s))


class Dependencies(BaseModel):
    """Every dependency's policy; one not named gets ``default``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    default: BreakerPolicy = BreakerPolicy()
    dependencies: dict[str, BreakerPolicy] = Field(default_factory=dict)

    @field_validator("dependencies")
    @classmethod
    def _names(cls, found: dict[str, BreakerPolicy]) -> dict[str, BreakerPolicy]:
        bad = sorted(name for name in found if not re.fullmatch(DEPENDENCY_PATTERN, name))
        if bad:
            raise ValueError(f"dependency names {bad} must match {DEPENDENCY_PATTERN}")
        return found

    def policy(self, dependency: str) -> BreakerPolicy:
        return self.dependencies.get(dependency, self.default)

    @classmethod
    def off(cls) -> Dependencies:
        """Breakers and budgets off for every dependency (calls are still counted)."""
        return cls(default=BreakerPolicy(enabled=False))

    @classmethod
    def parse(cls, text: str) -> Dependencies:
        """From ``RELAYFLOW_DEPENDENCIES`` (JSON)."""
        if not text.strip():
            return cls()
        try:
            return cls.model_validate_json(text)
        except (ValueError, ValidationError) as exc:
            raise ConfigError(f"RELAYFLOW_DEPENDENCIES is not a valid policy: {exc}") from None


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

    def add(self, other: Counts) -> None:
        self.calls += other.calls
        self.failures += other.failures
        self.first += other.first
        self.retries += other.retries
        self.latency = [a + b for a, b in zip(self.latency, other.latency, strict=True)]

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
        return doc | {f"l{i}": n for i, n in enumerate(self.latency) if n}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> Counts:
        counts = cls(
            calls=int(doc.get("calls", 0)),
            failures=int(doc.get("failures", 0)),
            first=int(doc.get("first", 0)),
            retries=int(doc.get("retries", 0)),
        )
        counts.latency = [int(doc.get(f"l{i}", 0)) for i in range(len(LATENCY_BOUNDS_S) + 1)]
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

    def breakers(self) -> list[BreakerState]:
        """Every breaker written so far."""
        ...


class BreakerMetrics(Protocol):
    def breaker_changed(self, dependency: str, to: str) -> None: ...

    def dependency_deferred(self, dependency: str, reason: str) -> None: ...

    def dependency_called(self, dependency: str, ok: bool) -> None: ...

    def breaker_state(self, dependency: str, state: str) -> None: ...


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


@dataclass
class _Known:
    """What this process last read of one dependency, and what it counted since."""

    state: BreakerState
    version: object | None
    counts: dict[int, Counts]
    read_at: datetime
    pending: dict[int, Counts] = field(default_factory=dict)
    flushed_at: datetime | None = None


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
        flush_s: float = 1.0,
        metrics: BreakerMetrics | None = None,
        shard: int | None = None,
    ) -> None:
        self._store = store
        self._policies = policies
        self._clock = clock
        self._shards = shards
        # One shard per process, picked at random: instances spread their writes.
        self._shard = random.randrange(shards) if shard is None else shard % shards
        self._refresh_s = refresh_s
        self._flush_s = flush_s
        self._metrics = metrics
        self._known: dict[str, _Known] = {}
        # Breakers another instance closed, seen here since closed_elsewhere() last asked.
        self._closings: set[str] = set()
        self._lock = threading.Lock()

    @property
    def policies(self) -> Dependencies:
        return self._policies

    # -- before a call ---------------------------------------------------------------------

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

    def _decide(
        self,
        dependency: str,
        known: _Known,
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

    def _within_budget(self, known: _Known, policy: BreakerPolicy, now: datetime) -> bool:
        window = self._window(known, policy, now, since=None)
        return window.retries < policy.retry_budget * window.first + policy.min_retries

    def _half_open(self, known: _Known, policy: BreakerPolicy, now: datetime) -> bool:
        """The open breaker's time is up: half-open it with this caller's call as the first
        probe, in one write (a round of an outage costs the document two writes: this one and
        the probe's failure). Whether it did; if a rival did, ``known`` holds what it wrote."""
        lease = now + timedelta(seconds=policy.probe_lease_s)
        wanted = known.state.to(Breaker.HALF_OPEN, now, "open time over: probing")
        return self._transition(known, replace(wanted, probes=(lease,)), now)

    def _take_probe(self, known: _Known, policy: BreakerPolicy, now: datetime) -> bool:
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

    # -- after a call ----------------------------------------------------------------------

    def record(self, verdict: Verdict, *, ok: bool, latency_s: float) -> bool:
        """Count what the call did; open, close or re-open the breaker as that decides.
        Whether this call closed it (the steps put off may then be brought forward)."""
        dependency = verdict.dependency
        closed = False
        policy = self._policies.policy(dependency)
        now = self._clock.now()
        with self._lock:
            known = self._fresh(dependency, now)
            bucket = known.pending.setdefault(self._bucket(policy, now), Counts())
            bucket.calls += 1
            bucket.failures += 0 if ok else 1
            bucket.observe(latency_s)
            if policy.enabled:
                if verdict.probe:
                    closed = self._probed(known, policy, now, ok)
                elif not ok and known.state.state is Breaker.CLOSED:
                    self._maybe_open(known, policy, now)
            self._maybe_flush(dependency, known, policy, now)
        if self._metrics:
            self._metrics.dependency_called(dependency, ok)
        return closed

    def _probed(self, known: _Known, policy: BreakerPolicy, now: datetime, ok: bool) -> bool:
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

    def _maybe_open(self, known: _Known, policy: BreakerPolicy, now: datetime) -> None:
        """Open if, over the newest stretch of the window holding at least ``min_calls``
        calls (the last second, the last two, … the whole window), ``failure_rate`` failed."""
        calls = failures = 0
        oldest = now.timestamp()
        for start, counts in self._buckets(known, policy, now, since=known.state.since):
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

    # -- what is known ---------------------------------------------------------------------

    def p95_s(self, dependency: str) -> float | None:
        """The dependency's p95 latency over its window, as last read (None: no calls)."""
        policy = self._policies.policy(dependency)
        now = self._clock.now()
        with self._lock:
            known = self._known.get(dependency)
            if known is None:
                return None
            return self._window(known, policy, now, since=None).p95_s()

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
                window = self._window(known, policy, now, since=None)
            state = known.state
            shown.append(
                {
                    "dependency": name,
                    "enabled": policy.enabled,
                    "state": state.state.value,
                    "since": _iso(state.since),
                    "reopen_at": _iso(state.reopen_at),
                    "probes_out": len(state.probes_out(now)),
                    "probe_ok": state.probe_ok,
                    "window_s": policy.window_s,
                    "calls": window.calls,
                    "failures": window.failures,
                    "first_attempts": window.first,
                    "retries": window.retries,
                    "retry_budget": policy.retry_budget * window.first + policy.min_retries,
                    "p95_s": window.p95_s(),
                    "transitions": [
                        {"at": _iso(t.at), "to": t.to.value, "why": t.why}
                        for t in state.transitions
                    ],
                }
            )
        return shown

    def flush(self) -> None:
        """Add what this process counted to the shared window now (e.g. before it stops)."""
        now = self._clock.now()
        with self._lock:
            for dependency, known in self._known.items():
                policy = self._policies.policy(dependency)
                self._maybe_flush(dependency, known, policy, now, force=True)

    # -- internals -------------------------------------------------------------------------

    def _fresh(self, dependency: str, now: datetime, *, force: bool = False) -> _Known:
        known = self._known.get(dependency)
        stale = known is None or (now - known.read_at).total_seconds() >= self._refresh_s
        if known is None or stale or force:
            state, version = self._store.breaker(dependency)
            counts = self._store.counts(dependency, self._shards)
            if known is None:
                known = _Known(_default(state, dependency), version, counts, now)
                self._known[dependency] = known
            else:
                self._seen(known, state)
                known.state, known.version, known.counts, known.read_at = (
                    state,
                    version,
                    counts,
                    now,
                )
        return known

    def _reread(self, known: _Known, now: datetime) -> None:
        state, version = self._store.breaker(known.state.dependency)
        self._seen(known, state)
        known.state, known.version = _default(state, known.state.dependency), version

    def _seen(self, known: _Known, state: BreakerState) -> None:
        """What the store holds, read over what this process knew (which it replaces)."""
        if state.state is known.state.state:
            return
        if state.state is Breaker.CLOSED:
            self._closings.add(state.dependency)
        if self._metrics:
            self._metrics.breaker_state(state.dependency, state.state.value)

    def _transition(self, known: _Known, wanted: BreakerState, now: datetime) -> bool:
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

    def _put(self, known: _Known, wanted: BreakerState, now: datetime) -> bool:
        written, version = self._store.put_breaker(wanted, version=known.version)
        if written:
            known.state, known.version = wanted, version
        return written

    def _count(self, known: _Known, now: datetime, *, retry: bool) -> None:
        policy = self._policies.policy(known.state.dependency)
        bucket = known.pending.setdefault(self._bucket(policy, now), Counts())
        if retry:
            bucket.retries += 1
        else:
            bucket.first += 1

    def _window(
        self, known: _Known, policy: BreakerPolicy, now: datetime, *, since: datetime | None
    ) -> Counts:
        """Counts over the window (from ``since``, if later), shared and not yet flushed."""
        total = Counts()
        for _, counts in self._buckets(known, policy, now, since=since):
            total.add(counts)
        return total

    def _buckets(
        self, known: _Known, policy: BreakerPolicy, now: datetime, *, since: datetime | None
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
        for source in (known.counts, known.pending):
            for bucket, counts in source.items():
                if bucket >= start:
                    merged.setdefault(bucket, Counts()).add(counts)
        return sorted(merged.items(), reverse=True)

    def _bucket(self, policy: BreakerPolicy, now: datetime) -> int:
        size = policy.bucket_s
        return int(now.timestamp() // size * size)

    def _maybe_flush(
        self,
        dependency: str,
        known: _Known,
        policy: BreakerPolicy,
        now: datetime,
        *,
        force: bool = False,
    ) -> None:
        due = known.flushed_at is None or (now - known.flushed_at).total_seconds() >= self._flush_s
        if not known.pending or not (due or force):
            return
        oldest = now.timestamp() - 2 * policy.window_s
        drop = [b for b in known.counts if b < oldest]
        try:
            self._store.add_counts(dependency, self._shard, known.pending, drop=drop)
        except Exception:  # the window is advice: a failed flush must not fail the step
            log.warning("could not add to a breaker window", exc_info=True)
            return
        for bucket, counts in known.pending.items():
            known.counts.setdefault(bucket, Counts()).add(counts)
        for bucket in drop:
            known.counts.pop(bucket, None)
        known.pending = {}
        known.flushed_at = now


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


def _default(state: BreakerState, dependency: str) -> BreakerState:
    return state if state.dependency else BreakerState(dependency)


def _hms(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%H:%M:%S")


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at else None


__all__ = [
    "Breaker",
    "BreakerPolicy",
    "BreakerState",
    "BreakerStore",
    "Breakers",
    "Counts",
    "Dependencies",
    "Transition",
    "Verdict",
    "state_doc",
    "state_from_doc",
]

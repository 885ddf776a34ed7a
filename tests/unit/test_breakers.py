"""relayflow.core.breakers: dependency breakers and retry budgets, on a fake clock.

The breaker module on its own (each transition, shared by two "processes" over one store,
probes and their leases, the budget), then through the engine: adaptive retries start from the
p95 latency, and operators see each breaker. What the engine does with a breaker's verdict
(steps put off, brought forward when it closes) is ``tests/unit/engine/test_protection.py``'s.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from relayflow.core.breaker_policy import BreakerPolicy, Dependencies
from relayflow.core.breaker_state import Breaker, Counts
from relayflow.core.breakers import Breakers, Verdict
from relayflow.core.clock import FakeClock
from relayflow.core.errors import RetryableError
from relayflow.core.flows import ActionStep, Flow, PollPolicy, PollStep, RetryPolicy, StepContext
from relayflow.testing import Harness
from relayflow.testing.memory import MemoryBreakers

DEP = "client-api"
POLICY = BreakerPolicy(
    window_s=30, min_calls=4, failure_rate=0.5, open_s=10, max_open_s=40, probes=2,
    retry_budget=0.5, min_retries=1,
)  # fmt: skip


def breakers(
    store: MemoryBreakers | None = None, clock: FakeClock | None = None, **kw: Any
) -> Breakers:
    policies = Dependencies(dependencies={DEP: BreakerPolicy(**{**POLICY.model_dump(), **kw})})
    return Breakers(store or MemoryBreakers(), policies, clock or FakeClock(), shards=2)


def call(b: Breakers, *, ok: bool, retry: bool = False, latency_s: float = 0.05) -> Verdict:
    verdict = b.check(DEP, retry=retry)
    if verdict.run:
        b.record(verdict, ok=ok, latency_s=latency_s)
    return verdict


def open_it(b: Breakers) -> None:
    """Fail ``POLICY.min_calls`` calls through ``b``: enough to open the breaker."""
    for _ in range(POLICY.min_calls):
        call(b, ok=False)


def state(store: MemoryBreakers) -> Breaker:
    return store.breaker(DEP)[0].state


# -- the breaker on its own -------------------------------------------------------------------


def test_closed_opens_when_the_failure_rate_over_the_window_passes_the_threshold() -> None:
    store, clock = MemoryBreakers(), FakeClock()
    b = breakers(store, clock)
    for _ in range(3):
        assert call(b, ok=False).run
    assert state(store) is Breaker.CLOSED  # 3 calls: under min_calls, no opinion yet
    assert call(b, ok=True).run
    assert state(store) is Breaker.CLOSED  # 3 of 4 failed, but the last was a success
    assert call(b, ok=False).run  # 4 of 5 failed: ≥ 50 % over ≥ 4 calls
    stored = store.breaker(DEP)[0]
    assert stored.state is Breaker.OPEN
    assert stored.reopen_at == clock.now() + timedelta(seconds=10)
    assert stored.transitions[-1].why == "4 of 5 calls failed in 1s (≥ 50%)"


def test_an_open_breaker_puts_calls_off_until_it_may_half_open() -> None:
    store, clock = MemoryBreakers(), FakeClock()
    b = breakers(store, clock)
    open_it(b)
    clock.advance(3)
    verdict = b.check(DEP, retry=False)
    assert not verdict.run and verdict.reason == "open"
    reopen = store.breaker(DEP)[0].reopen_at
    assert reopen is not None and verdict.until is not None
    # Not before it may half-open; spread over one open time, so they do not all come back.
    assert reopen <= verdict.until <= reopen + timedelta(seconds=POLICY.open_s)
    spread = {b.check(DEP, retry=False, key=f"flow-{i}").until for i in range(20)}
    assert len(spread) == 20
    assert "client-api's breaker is open until" in verdict.detail


def test_a_put_off_step_waits_its_own_next_try_however_soon_probing_starts() -> None:
    store, clock = MemoryBreakers(), FakeClock()
    b = breakers(store, clock, open_s=2, max_open_s=2)
    open_it(b)
    reopen = store.breaker(DEP)[0].reopen_at
    assert reopen is not None
    early = b.check(DEP, retry=False, natural_s=8.0, key="early")
    assert early.until == clock.now() + timedelta(seconds=8)  # no more often than it would poll
    clock.advance(1.2)  # probing starts in under a second: still not sooner than its next poll
    late = b.check(DEP, retry=False, natural_s=8.0, key="late")
    assert late.until == clock.now() + timedelta(seconds=8)
    clock.advance(1.0)  # half-open: the first caller probes, the next is put off as well
    assert b.check(DEP, retry=False, key="prober").probe
    b.check(DEP, retry=False, key="prober-2")
    after = b.check(DEP, retry=False, natural_s=8.0, key="after")
    assert (after.reason, after.until) == ("half_open", clock.now() + timedelta(seconds=8))


def test_half_open_sends_one_probe_then_lets_calls_through_and_closes_after_enough_do() -> None:
    store, clock = MemoryBreakers(), FakeClock()
    b = breakers(store, clock, probes=3)
    open_it(b)
    clock.advance(10)
    writes = store.writes
    first, waiting = (b.check(DEP, retry=False) for _ in range(2))
    assert state(store) is Breaker.HALF_OPEN
    assert store.writes == writes + 1  # half-opened with the first probe's lease, one write
    assert first.probe  # alone: were the dependency still down, the round costs one call
    assert not waiting.run and waiting.reason == "half_open"
    b.record(first, ok=True, latency_s=0.05)
    assert state(store) is Breaker.HALF_OPEN
    writes = store.writes
    second, third, fourth = (b.check(DEP, retry=False) for _ in range(3))
    assert second.probe and third.probe and fourth.probe  # once one succeeded, all go through
    assert store.writes == writes  # and take no lease
    b.record(second, ok=True, latency_s=0.05)
    assert state(store) is Breaker.HALF_OPEN
    b.record(third, ok=True, latency_s=0.05)  # probes=3 succeeded
    closed = store.breaker(DEP)[0]
    assert closed.state is Breaker.CLOSED and closed.opened == 0
    assert [t.to for t in closed.transitions] == [Breaker.OPEN, Breaker.HALF_OPEN, Breaker.CLOSED]
    assert b.check(DEP, retry=False).run
    b.record(fourth, ok=True, latency_s=0.05)  # after the closing: counted, changes nothing
    assert store.breaker(DEP)[0] == closed


def test_after_a_probe_succeeded_one_failure_among_the_calls_let_through_opens_it_again() -> None:
    store, clock = MemoryBreakers(), FakeClock()
    b = breakers(store, clock, probes=3)
    open_it(b)
    clock.advance(10)
    call(b, ok=True)  # the first probe
    flaky, lucky = b.check(DEP, retry=False), b.check(DEP, retry=False)
    assert flaky.probe and lucky.probe
    b.record(flaky, ok=False, latency_s=0.05)
    assert state(store) is Breaker.OPEN and store.breaker(DEP)[0].opened == 2
    b.record(lucky, ok=True, latency_s=0.05)  # too late: it is open again
    assert state(store) is Breaker.OPEN
    assert not b.check(DEP, retry=False).run


def test_a_failed_probe_opens_the_breaker_again_for_twice_as_long_up_to_the_cap() -> None:
    store, clock = MemoryBreakers(), FakeClock()
    b = breakers(store, clock)
    open_it(b)
    opens = []
    for _ in range(4):
        clock.advance(store.breaker(DEP)[0].reopen_at.timestamp() - clock.now().timestamp())  # type: ignore[union-attr]
        probe = b.check(DEP, retry=False)
        assert probe.probe
        b.record(probe, ok=False, latency_s=0.05)
        stored = store.breaker(DEP)[0]
        assert stored.state is Breaker.OPEN
        opens.append((stored.reopen_at - clock.now()).total_seconds())  # type: ignore[operator]
    assert opens == [20, 40, 40, 40]


def test_the_newest_failures_open_the_breaker_however_many_successes_the_window_holds() -> None:
    store, clock = MemoryBreakers(), FakeClock()
    b = breakers(store, clock)
    for _ in range(29):
        for _ in range(10):
            call(b, ok=True)  # 290 successes over 29 s
        clock.advance(1)
    for _ in range(4):
        call(b, ok=False)  # the outage: its first second
    assert state(store) is Breaker.OPEN


def test_an_instance_with_a_stale_view_does_not_call_once_a_rivals_probe_reopened_it() -> None:
    store, clock = MemoryBreakers(), FakeClock()
    a, b = breakers(store, clock), breakers(store, clock)
    open_it(a)
    a.flush()
    clock.advance(9.8)
    assert not b.check(DEP, retry=False).run  # b reads: open until 10 s
    clock.advance(0.2)
    probe = a.check(DEP, retry=False)
    assert probe.probe
    a.record(probe, ok=False, latency_s=0.05)  # open again, until 30 s
    clock.advance(0.5)  # b's view (open until 10 s) is not a second old: it tries to half-open
    late = b.check(DEP, retry=False)
    assert not late.run and late.reason == "open"
    assert [t.to for t in store.breaker(DEP)[0].transitions] == [
        Breaker.OPEN,
        Breaker.HALF_OPEN,
        Breaker.OPEN,
    ]


def test_a_probe_whose_outcome_never_came_frees_its_place_when_its_lease_ends() -> None:
    store, clock = MemoryBreakers(), FakeClock()
    b = breakers(store, clock, probes=1, probe_lease_s=15)
    open_it(b)
    clock.advance(10)
    assert b.check(DEP, retry=False).probe  # its instance dies: no record()
    clock.advance(5)
    assert not b.check(DEP, retry=False).run
    clock.advance(11)
    assert b.check(DEP, retry=False).probe


def test_two_processes_share_one_breaker() -> None:
    store, clock = MemoryBreakers(), FakeClock()
    worker, poller = breakers(store, clock), breakers(store, clock)
    for _ in range(2):
        call(worker, ok=False)
        call(poller, ok=False)
    clock.advance(1)  # each flushes its counts and reads the other's
    call(worker, ok=False)
    call(poller, ok=False)
    assert state(store) is Breaker.OPEN  # neither alone saw 4 failed calls
    clock.advance(1)
    assert not worker.check(DEP, retry=False).run
    assert not poller.check(DEP, retry=False).run
    # Only one of them writes each transition: the store's version refuses the other.
    assert [t.to for t in store.breaker(DEP)[0].transitions] == [Breaker.OPEN]


def test_a_closed_breaker_starts_its_window_clean() -> None:
    store, clock = MemoryBreakers(), FakeClock()
    b = breakers(store, clock)
    open_it(b)
    clock.advance(10)
    for _ in range(2):  # probes=2, one after the other
        probe = b.check(DEP, retry=False)
        assert probe.probe
        b.record(probe, ok=True, latency_s=0.05)
    assert state(store) is Breaker.CLOSED
    clock.advance(5)
    call(b, ok=False)  # the outage's failures are still in the window, but before it closed
    assert state(store) is Breaker.CLOSED


def test_retries_beyond_the_budget_are_put_off_and_first_attempts_are_not() -> None:
    store, clock = MemoryBreakers(), FakeClock()
    b = breakers(store, clock, min_calls=1000)  # the breaker stays out of it
    for _ in range(4):
        assert call(b, ok=True).run  # 4 first attempts: budget 0.5 * 4 + 1 = 3 retries
    assert [call(b, ok=False, retry=True).run for _ in range(4)] == [True, True, True, False]
    spent = b.check(DEP, retry=True)
    assert spent.reason == "budget" and spent.detail == "client-api's retry budget is spent"
    assert call(b, ok=True).run  # a first attempt always goes
    clock.advance(31)  # the window moves on: the budget is back
    assert b.check(DEP, retry=True).run


def test_a_disabled_breaker_lets_everything_through_but_still_counts() -> None:
    store, clock = MemoryBreakers(), FakeClock()
    b = breakers(store, clock, enabled=False)
    for _ in range(10):
        assert call(b, ok=False, retry=True).run
    assert state(store) is Breaker.CLOSED
    (view,) = b.views()
    assert (view["calls"], view["failures"], view["retries"]) == (10, 10, 10)


def test_the_view_shows_the_windows_failure_rate_against_the_policy_that_opens_it() -> None:
    b = breakers()
    (quiet,) = b.views()
    assert quiet["failure_rate"] is None  # no call yet: no rate
    call(b, ok=True)
    call(b, ok=False, retry=True)
    call(b, ok=False)
    (view,) = b.views()
    assert (view["calls"], view["failures"], view["failure_rate"]) == (3, 2, 0.6667)
    assert (view["retries"], view["retry_budget"]) == (1, 0.5 * 2 + 1)
    assert view["policy"] == POLICY.model_dump()


def test_p95_comes_from_the_latency_histogram() -> None:
    counts = Counts()
    for _ in range(94):
        counts.observe(0.02)
    for _ in range(6):
        counts.observe(2.0)
    assert counts.p95_s() == 2.5
    b = breakers(min_calls=1000)
    assert b.p95_s(DEP) is None
    for latency in (0.2,) * 19 + (0.7,):
        call(b, ok=True, latency_s=latency)
    assert b.p95_s(DEP) == 0.25


# -- through the engine -----------------------------------------------------------------------


class FlakyApi:
    """The dependency: down until ``up_at`` (virtual time), then up."""

    def __init__(self, h: Harness, down_for_s: float) -> None:
        self.h, self.up_at = h, h.now + timedelta(seconds=down_for_s)
        self.calls = 0

    def __call__(self, ctx: StepContext) -> dict[str, Any]:
        self.calls += 1
        if self.h.now < self.up_at:
            raise RetryableError("connection refused", code="UNAVAILABLE")
        return {"id": ctx.idempotency_key}


def flow_calling(api: FlakyApi, *, deadline_s: float = 900, attempts: int = 5) -> Flow:
    return Flow(
        name="sync",
        steps=(
            ActionStep("reserve", lambda ctx: {"ok": True}, compensate=lambda ctx: {"undone": 1}),
            ActionStep(
                "push",
                api,
                retry=RetryPolicy(max_attempts=attempts, initial_s=1, max_interval_s=4),
                dependency=DEP,
            ),
            PollStep("settle", lambda ctx: {}, policy=PollPolicy(deadline_s=deadline_s)),
        ),
    )


def harness_with(api_down_s: float, **kw: Any) -> tuple[Harness, FlakyApi]:
    h = Harness([], dependencies=Dependencies(dependencies={DEP: POLICY}))
    api = FlakyApi(h, api_down_s)
    h.deploy(flow_calling(api, **kw))
    return h, api


def open_from_elsewhere(h: Harness) -> None:
    """Another instance sees the dependency fail and opens the shared breaker."""
    other = Breakers(h.breakers, h.dependencies, h.clock, shards=1)
    for _ in range(POLICY.min_calls):
        call(other, ok=False)
    other.flush()  # what it counted reaches the shared window (it would within a second)
    assert h.breaker(DEP).state is Breaker.OPEN


def test_adaptive_retries_start_from_the_dependencys_p95_latency() -> None:
    slow = BreakerPolicy(min_calls=1000)  # the breaker stays closed
    h = Harness([], dependencies=Dependencies(dependencies={DEP: slow}))
    answers = iter([None] * 20 + ["fail"])

    def api(ctx: StepContext) -> dict[str, Any]:
        h.clock.advance(3.0)  # each call takes 3 s of virtual time
        if next(answers, None) == "fail":
            raise RetryableError("timeout", code="TIMEOUT")
        return {}

    adaptive = RetryPolicy(initial_s=0.5, jitter=0, adaptive=True)
    h.deploy(Flow(name="slow", steps=(ActionStep("call", api, retry=adaptive, dependency=DEP),)))
    for _ in range(20):
        h.run(h.start("slow", {}))
    flow_id = h.start("slow", {})
    h.deliver_next(flow_id)
    retry = h.flow(flow_id).history[-1]
    assert retry.outcome == "retryable error"
    assert retry.delay_s == 5.0  # the p95 bucket (2.5 to 5 s), not initial_s=0.5


# -- where operators see it -------------------------------------------------------------------


def test_the_api_and_the_cli_show_each_breaker_with_its_transitions() -> None:
    from relayflow.cli import render
    from relayflow.metrics import Metrics
    from relayflow.telemetry import Counters
    from relayflow.web.access import Access
    from relayflow.web.api import build_api
    from relayflow.web.operations import Operations
    from tests.unit.test_api import FakeDeadLetters

    h, _ = harness_with(api_down_s=60)
    open_from_elsewhere(h)
    ops = Operations(
        engine=h.engine,
        store=h.store,
        access=Access(verifier=None),
        dead_letters=FakeDeadLetters(),
        counters=Counters(),
        metrics=Metrics(),
    )
    client = build_api(ops).test_client()
    (shown,) = client.get("/breakers", environ_base={"REMOTE_ADDR": "127.0.0.1"}).get_json()[
        "breakers"
    ]
    assert (shown["dependency"], shown["state"], shown["failures"]) == (DEP, "open", 4)
    assert shown["transitions"][-1]["to"] == "open"
    table = render.breaker_table([shown]).splitlines()
    assert table[1].split()[:2] == ["client-api", "open"]
    assert "→ open: 4 of 4 calls failed in 1s" in table[2]


def test_breaker_metrics_count_transitions_deferrals_and_calls() -> None:
    from relayflow.metrics import OtelMetrics
    from tests.unit.test_metrics import otel, value

    metrics: OtelMetrics = otel()
    h = Harness([], dependencies=Dependencies(dependencies={DEP: POLICY}), metrics=metrics)
    api = FlakyApi(h, down_for_s=40)
    h.deploy(flow_calling(api, attempts=3))
    for flow_id in [h.start("sync", {}) for _ in range(3)]:
        h.run(flow_id)
    assert value(metrics, "relayflow.breaker.transitions", dependency=DEP, to="open") >= 1
    assert value(metrics, "relayflow.breaker.transitions", dependency=DEP, to="closed") == 1
    assert value(metrics, "relayflow.dependency.deferred", dependency=DEP, reason="open") >= 1
    assert value(metrics, "relayflow.dependency.calls", dependency=DEP, outcome="failed") >= 4
    assert value(metrics, "relayflow.breaker.state", dependency=DEP) == 0  # closed again


def test_ready_asks_without_counting_and_waits_out_an_open_breaker_until_it_may_probe() -> None:
    store, clock = MemoryBreakers(), FakeClock()
    b = breakers(store, clock)
    assert b.ready(DEP).run  # closed
    for _ in range(POLICY.min_calls):
        call(b, ok=False)
    assert state(store) is Breaker.OPEN
    waiting = b.ready(DEP)
    assert (waiting.run, waiting.reason, waiting.detail) == (
        False,
        "open",
        f"{DEP}'s breaker is open",
    )
    assert waiting.until is not None and waiting.until >= clock.now() + timedelta(seconds=1)
    clock.advance(POLICY.open_s)  # it may probe now: a batch's flows are those probes
    assert b.ready(DEP).run
    assert state(store) is Breaker.OPEN  # asking took no probe and changed nothing
    assert b.check(DEP, retry=False).probe  # the first call half-opens it
    assert b.ready(DEP).reason == "half_open"
    (view,) = b.views()
    assert view["calls"] == POLICY.min_calls  # ready() counted no call


def test_ready_waits_while_the_retry_budget_is_spent() -> None:
    store, clock = MemoryBreakers(), FakeClock()
    b = breakers(store, clock, min_calls=1000)
    for _ in range(4):
        call(b, ok=True)
    for _ in range(3):
        call(b, ok=False, retry=True)
    assert b.ready(DEP).reason == "budget"
    clock.advance(35)  # the window (30 s) has moved past them
    assert b.ready(DEP).run
    assert breakers(store, clock, enabled=False).ready(DEP).run

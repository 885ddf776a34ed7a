"""metrics: after a batch of flows, the instruments hold exactly what the batch did.

The flows run through the real engine in memory (relayflow.testing.Harness) with OtelMetrics
on an in-memory reader, read back through ``snapshot()`` as GET /metrics shows them. The
no-op base the engine reports to when metrics are off is ``relayflow.core.metrics.Metrics``
(``relayflow.metrics`` re-exports it), tested last.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from relayflow.core.engine import Limits
from relayflow.core.errors import NotReady, PermanentError, RetryableError
from relayflow.core.flows import ActionStep, Flow, PollPolicy, PollStep, RetryPolicy, StepContext
from relayflow.core.metrics import Metrics as NoMetrics
from relayflow.core.ports import Unreadable
from relayflow.core.state import Status
from relayflow.metrics import Metrics, OtelMetrics, OverdueAges, configure_metrics, oldest_overdue
from relayflow.settings import Settings
from relayflow.testing import Harness

POLL = PollPolicy(initial_s=1.0, multiplier=2.0, max_interval_s=10.0, max_polls=10)
RETRY = RetryPolicy(max_attempts=3, initial_s=1.0, max_interval_s=5.0)


def reserve(ctx: StepContext) -> dict[str, Any]:
    return {"id": f"r-{ctx.flow_id}"}


def await_ready(ctx: StepContext) -> dict[str, Any]:
    if ctx.poll < int(ctx.input.get("polls", 1)) - 1:
        raise NotReady(f"poll {ctx.poll}")
    return {"ready": True}


def finish(ctx: StepContext) -> dict[str, Any]:
    mode = ctx.input.get("finish", "ok")
    if mode == "refused":
        raise PermanentError("refused by the client", code="REFUSED")
    if mode == "flaky" and ctx.attempt == 0:
        raise RetryableError("503 from the client", code="HTTP_503")
    return {"done": True}


FLOW = Flow(
    name="demo",
    steps=(
        ActionStep("reserve", reserve, compensate=lambda ctx: {}, retry=RETRY),
        PollStep("await_ready", await_ready, policy=POLL),
        ActionStep("finish", finish, retry=RETRY),
    ),
)


def otel() -> OtelMetrics:
    reader = InMemoryMetricReader()
    return OtelMetrics(MeterProvider(metric_readers=[reader]), reader=reader)


def points(metrics: Metrics, name: str) -> list[dict[str, Any]]:
    snap = metrics.snapshot()
    assert snap is not None
    return list(snap.get(name, {"points": []})["points"])


def value(metrics: Metrics, name: str, **labels: str) -> Any:
    """The value (counter, gauge) or count (histogram) of the one point with ``labels``."""
    found = [p for p in points(metrics, name) if p["labels"] == labels]
    assert len(found) <= 1
    if not found:
        return 0
    return found[0].get("value", found[0].get("count"))


@pytest.fixture
def batch() -> tuple[Harness, OtelMetrics]:
    """Three flows that poll twice and succeed, one that retries once and succeeds, two that
    are refused at the last step (and undone), two malformed messages, one id conflict."""
    metrics = otel()
    h = Harness(FLOW, metrics=metrics)
    for i in range(3):
        h.start("demo", {"polls": 2}, flow_id=f"ok-{i}")
    h.start("demo", {"polls": 1, "finish": "flaky"}, flow_id="flaky-0")
    for i in range(2):
        h.start("demo", {"polls": 3, "finish": "refused"}, flow_id=f"refused-{i}")
    h.publish(b"{not json")
    h.publish({"flow": "nope", "input": {}})
    h.publish({"flow": "demo", "input": {"polls": 9}, "flow_id": "ok-0"})  # same id, new input
    h.run()
    return h, metrics


def test_flows_started_and_ended_are_counted_by_flow_status_and_code(
    batch: tuple[Harness, OtelMetrics],
) -> None:
    h, metrics = batch
    assert value(metrics, "relayflow.flows.started", flow="demo", tenant="default") == 6
    ended = {
        (p["labels"]["status"], p["labels"]["code"]): p["value"]
        for p in points(metrics, "relayflow.flows.ended")
    }
    assert ended == {("SUCCEEDED", "OK"): 4, ("FAILED", "REFUSED"): 2}
    assert [h.flow(f"refused-{i}").status for i in range(2)] == [Status.FAILED] * 2


def test_polls_per_ended_flow_is_a_histogram_of_the_flows_polls(
    batch: tuple[Harness, OtelMetrics],
) -> None:
    _, metrics = batch
    (succeeded,) = [
        p for p in points(metrics, "relayflow.flow.polls") if p["labels"]["status"] == "SUCCEEDED"
    ]
    assert (succeeded["count"], succeeded["sum"]) == (4, 3 * 2 + 1)
    (failed,) = [
        p for p in points(metrics, "relayflow.flow.polls") if p["labels"]["status"] == "FAILED"
    ]
    assert (failed["count"], failed["sum"], failed["max"]) == (2, 6, 3)


def test_each_handler_run_is_timed_with_its_step_kind_and_outcome(
    batch: tuple[Harness, OtelMetrics],
) -> None:
    _, metrics = batch
    runs = {
        (p["labels"]["step"], p["labels"]["kind"], p["labels"]["outcome"]): p["count"]
        for p in points(metrics, "relayflow.step.duration")
    }
    assert runs == {
        ("reserve", "action", "completed"): 6,
        ("await_ready", "poll", "waiting"): 3 * 1 + 2 * 2,
        ("await_ready", "poll", "completed"): 6,
        ("finish", "action", "completed"): 4,
        ("finish", "action", "retry"): 1,
        ("finish", "action", "failed"): 2,
        ("reserve", "compensate", "completed"): 2,
    }
    durations = points(metrics, "relayflow.step.duration")
    assert all(p["sum"] >= 0 and p["labels"]["flow"] == "demo" for p in durations)


def test_retries_and_rejected_messages_are_counted_with_their_codes(
    batch: tuple[Harness, OtelMetrics],
) -> None:
    _, metrics = batch
    retries = value(metrics, "relayflow.step.retries", flow="demo", step="finish", code="HTTP_503")
    assert retries == 1
    rejected = {
        (p["labels"]["flow"], p["labels"]["code"]): p["value"]
        for p in points(metrics, "relayflow.messages.rejected")
    }
    assert rejected == {("unknown", "INVALID_MESSAGE"): 2, ("demo", "FLOW_ID_CONFLICT"): 1}


def test_a_delivery_that_finds_the_step_claimed_is_a_claim_conflict() -> None:
    # given a handler that, while it holds the claim, sees its task delivered a second time
    metrics = otel()
    h = Harness(FLOW, metrics=metrics)
    seen = []

    def reserve_twice(ctx: StepContext) -> dict[str, Any]:
        if not seen:
            seen.append(h.engine.run_task(duplicate))
        return {"id": "r-1"}

    h.script("reserve", reserve_twice)
    flow_id = h.start("demo", {"polls": 1})
    duplicate = h.queue.only(flow_id).payload()
    # (its first dispatch comes later than the create's claim for it covers: it claims itself)
    h.advance(Limits().first_delivery_within_s + 1)

    # when the flow runs
    h.run(flow_id)

    # then the duplicate was answered busy and counted once, for the step it found claimed
    assert [str(r) for r in seen] == ["busy"]
    assert value(metrics, "relayflow.claim.conflicts", flow="demo", step="reserve") == 1


def test_a_sweeper_rescue_is_counted_and_the_oldest_overdue_age_is_a_gauge() -> None:
    # given a flow whose poll task was lost 300 s ago
    metrics = otel()
    h = Harness(FLOW, metrics=metrics)
    flow_id = h.start("demo", {"polls": 3})
    h.deliver_next(flow_id)
    chain_first = h.queue.only(flow_id).next
    h.deliver_next(flow_id)  # poll 0: not ready, poll 1 queued
    lost = h.queue.only(flow_id)
    h.queue.lose(lost.next.task_id)
    h.advance_to(lost.next.run_at + timedelta(seconds=300))

    # when the sweeper runs
    report = h.sweep(grace_s=120)

    # then it rescued the flow, and the gauge says how late its task was: the task the
    # document names, the chain's first poll (poll 0 wrote nothing: its chain went on in
    # poll 1's task), due one backoff step before the lost one
    assert report.rescued == 1
    assert value(metrics, "relayflow.sweeper.rescues", flow="demo") == 1
    first_poll_wait_s = (lost.next.run_at - chain_first.run_at).total_seconds()
    assert first_poll_wait_s > 0
    age = value(metrics, "relayflow.sweeper.oldest_overdue_age", flow="demo")
    assert age == pytest.approx(300.0 + first_poll_wait_s)

    # and once nothing is overdue, the flow type's gauge falls back to 0
    h.sweep(grace_s=120)
    assert value(metrics, "relayflow.sweeper.oldest_overdue_age", flow="demo") == 0.0


def test_an_old_sweep_is_not_reported_for_ever() -> None:
    ages = OverdueAges(stale_after_s=0.0)
    ages.update({"demo": 42.0})
    assert list(ages.observe()) == []


def test_unreadable_documents_have_no_age_to_report() -> None:
    h = Harness(FLOW)
    h.start("demo", {"polls": 1}, flow_id="f-1")
    record = h.flow("f-1")
    assert record.next is not None
    later = record.next.run_at + timedelta(seconds=5)
    ages = oldest_overdue([Unreadable("bad", "no longer parses"), record], now=later)
    assert ages == {"demo": 5.0}


def test_metrics_off_builds_nothing_and_shows_nothing() -> None:
    metrics = configure_metrics(Settings(metrics_exporter="none"), service="test")
    assert type(metrics) is Metrics
    assert metrics.snapshot() is None


def test_local_metrics_are_readable_in_process() -> None:
    metrics = configure_metrics(Settings(metrics_exporter="local"), service="test")
    metrics.flow_started("demo")
    assert value(metrics, "relayflow.flows.started", flow="demo", tenant="default") == 1
    assert isinstance(metrics, OtelMetrics)
    metrics.shutdown()


def test_the_base_metrics_take_every_report_and_show_nothing() -> None:
    # given the engine's own base (metrics off), every report the engine makes is accepted
    h = Harness(FLOW)
    h.start("demo", {"polls": 2, "finish": "flaky"}, flow_id="f-1")
    record = h.run("f-1")
    assert record is not None and record.status is Status.SUCCEEDED
    assert NoMetrics is Metrics  # the one relayflow.metrics re-exports
    base = NoMetrics()
    assert base.enabled is False
    base.flow_started("demo")
    base.flow_ended(record)
    base.cleanup_ended(record, "acme")
    base.step_ran("demo", record.position, "completed", 0.1)
    base.step_retried("demo", "finish", "HTTP_503")
    base.claim_conflict("demo", "finish")
    base.sweeper_rescued("demo")
    base.sweep_found([record], now=record.updated_at)
    base.message_rejected("demo", "INVALID_MESSAGE")
    base.breaker_changed("client-api", "open")
    base.breaker_state("client-api", "open")
    base.dependency_deferred("client-api", "open")
    base.dependency_called("client-api", ok=False)
    base.tenants_waiting({"acme": 3})
    # then it shows nothing: GET /metrics says metrics are off
    assert base.snapshot() is None

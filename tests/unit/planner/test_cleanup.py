"""relayflow.core.planner.cleanup: undo until it is done (issue 18). An undo that fails for a
retryable reason does not hold the flow's end back, and is not given up after a few tries. The
flow ends at once with its clean-up ``pending``; the undo goes on as the clean-up, newest
effect first, on a long backoff that honours the dependency's breaker, until it is done or its
window closes (``abandoned``, counted for an alert); an operator can undo again. Through
relayflow.testing's harness, all in virtual time."""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

import pytest

from relayflow import ActionStep, Flow, RetryPolicy, StepContext
from relayflow.core.breaker_policy import BreakerPolicy, Dependencies
from relayflow.core.engine import Limits
from relayflow.core.errors import InvalidTransition, PermanentError, RetryableError
from relayflow.core.flows import ForEach
from relayflow.core.planner.cleanup import cleanup_delay
from relayflow.core.position import TaskKind
from relayflow.core.records import CleanupState, EffectState, FlowRecord
from relayflow.core.state import Status
from relayflow.testing import Harness
from tests.unit.planner.sample import plan, started

FAST = RetryPolicy(max_attempts=3, initial_s=1.0, max_interval_s=5.0, jitter=0.0)
WINDOW_S = 6 * 3600.0


class Api:
    """A client API that honours idempotency keys; its undo fails while ``down``."""

    def __init__(self) -> None:
        self.made: dict[str, str] = {}
        self.live: set[str] = set()
        self.down = False

    def create(self, key: str) -> str:
        if key not in self.made:
            self.made[key] = f"eff-{len(self.made) + 1}"
            self.live.add(self.made[key])
        return self.made[key]

    def delete(self, effect_id: str) -> None:
        if self.down:
            raise RetryableError("503 from the client API", code="UNAVAILABLE")
        self.live.discard(effect_id)


def saga(api: Api, *, dependency: str | None = None) -> Flow:
    """reserve -> charge -> finish (fails for good): reserve and charge are undone."""

    def make(step: str) -> tuple[Any, Any]:
        def run(ctx: StepContext) -> dict[str, str]:
            return {"id": api.create(ctx.idempotency_key)}

        def undo(ctx: StepContext) -> dict[str, str]:
            api.delete(ctx.outputs[step]["id"])
            return {}

        return run, undo

    reserve, release = make("reserve")
    charge, refund = make("charge")

    def finish(ctx: StepContext) -> None:
        raise PermanentError("the order was declined", code="DECLINED")

    return Flow(
        name="saga",
        steps=(
            ActionStep("reserve", reserve, retry=FAST, compensate=release, dependency=dependency),
            ActionStep("charge", charge, retry=FAST, compensate=refund, dependency=dependency),
            ActionStep("finish", finish, retry=FAST),
        ),
    )


def harness(api: Api, **kw: Any) -> Harness:
    limits = Limits(continue_inline=True, undo_window_s=WINDOW_S)
    return Harness(saga(api, **kw), limits=limits, dependencies=Dependencies.off())


def states(record: FlowRecord) -> list[EffectState]:
    """The states of reserve's and charge's effects (finish's was refused: it never was)."""
    return [e.state for e in record.effects if e.step != "finish"]


def undo_calls(h: Harness) -> list[tuple[str, int]]:
    return [(c.step, c.context.attempt) for c in h.calls if c.kind is TaskKind.COMPENSATE]


def test_the_flow_ends_at_once_and_its_clean_up_undoes_the_effect_once_the_api_is_back() -> None:
    api = Api()
    h = harness(api)
    api.down = True
    flow_id = h.start("saga")

    ended = h.run(flow_id)

    assert ended is not None and ended.status is Status.FAILED
    assert ended.result is not None and ended.result.code == "DECLINED"
    assert ended.cleanup is not None and ended.cleanup.state is CleanupState.PENDING
    assert ended.cleanup.until == ended.cleanup.since + timedelta(seconds=WINDOW_S)
    assert len(api.live) == 2  # charge's undo failed three times: nothing undone yet
    (event,) = h.results(flow_id)
    assert event["status"] == "FAILED" and event["event"] == "result"
    assert event["cleanup"]["state"] == "pending"
    api.down = False

    cleaned = h.run_cleanup(flow_id)

    assert cleaned.status is Status.FAILED  # the end does not change; the clean-up's does
    assert cleaned.cleanup is not None and cleaned.cleanup.state is CleanupState.DONE
    assert api.live == set()
    assert states(cleaned) == [EffectState.UNDONE] * 2
    assert [s for s, _ in undo_calls(h)] == ["charge"] * 4 + ["reserve"]  # newest first
    first, second = h.results(flow_id)
    assert (first["event"], second["event"]) == ("result", "cleanup")
    assert second["cleanup"]["state"] == "done" and second["status"] == "FAILED"
    assert [e.outcome for e in cleaned.history[-2:]] == ["compensated", "clean-up done"]


def test_the_clean_up_keeps_newest_first_and_waits_on_a_growing_backoff() -> None:
    api = Api()
    h = harness(api)
    api.down = True
    flow_id = h.start("saga")
    h.run(flow_id)
    began = h.now

    h.run_until(began + timedelta(hours=2))  # still down for two hours

    tries = h.calls_of("charge", undo=True)
    assert h.calls_of("reserve", undo=True) == []  # not before the newer effect is undone
    gaps = [(b.deadline - a.deadline).total_seconds() for a, b in itertools.pairwise(tries)]
    cleanup_gaps = gaps[len(FAST_TRIES) - 1 :]
    assert cleanup_gaps == sorted(cleanup_gaps) and cleanup_gaps[0] >= 24.0  # ~30 s, growing
    assert max(cleanup_gaps) <= 3600 * 1.2
    api.down = False
    assert h.run_cleanup(flow_id).cleanup.state is CleanupState.DONE  # type: ignore[union-attr]
    assert api.live == set()


FAST_TRIES = range(FAST.max_attempts)


def test_a_clean_up_that_outlasts_its_window_is_abandoned_and_counted() -> None:
    api = Api()
    h = harness(api)
    api.down = True
    flow_id = h.start("saga")
    ended = h.run(flow_id)
    assert ended is not None and ended.cleanup is not None
    until = ended.cleanup.until

    abandoned = h.run_cleanup(flow_id)

    cleanup = abandoned.cleanup
    assert cleanup is not None and cleanup.state is CleanupState.ABANDONED
    assert cleanup.left == ["charge", "reserve"]  # both may be live
    assert "undo window closed" in cleanup.reason
    last = h.calls_of("charge", undo=True)[-1]
    assert h.now == until and last.deadline - timedelta(seconds=100) == until  # the last try
    assert states(abandoned) == [EffectState.UNDO_FAILED] * 2
    assert h.results(flow_id)[-1]["cleanup"]["state"] == "abandoned"
    assert abandoned.history[-1].outcome == "clean-up abandoned"
    assert len(api.live) == 2


def test_an_operator_undoes_again_what_an_abandoned_clean_up_left() -> None:
    api = Api()
    h = harness(api)
    api.down = True
    flow_id = h.start("saga")
    h.run_cleanup(flow_id)
    api.down = False

    asked = h.engine.undo(flow_id, reason="the client API is back", by="ops@example.com")

    assert asked.cleanup is not None and asked.cleanup.state is CleanupState.PENDING
    entry = asked.history[-1]
    assert (entry.outcome, entry.by) == ("undo requested", "ops@example.com")
    done = h.run_cleanup(flow_id)
    assert done.cleanup is not None and done.cleanup.state is CleanupState.DONE
    assert api.live == set()
    with pytest.raises(InvalidTransition, match="nothing is left to undo"):
        h.engine.undo(flow_id)


def test_a_flow_cannot_be_retried_while_its_clean_up_runs() -> None:
    api = Api()
    h = harness(api)
    api.down = True
    flow_id = h.start("saga")
    h.run(flow_id)
    with pytest.raises(InvalidTransition, match="clean-up is still undoing"):
        h.retry(flow_id)
    with pytest.raises(InvalidTransition, match="clean-up is still undoing"):
        h.engine.undo(flow_id)


def test_an_undo_that_fails_for_good_in_the_clean_up_is_left_and_the_rest_still_undone() -> None:
    api = Api()
    h = harness(api)
    api.down = True
    flow_id = h.start("saga")
    h.run(flow_id)
    api.down = False
    h.script_undo("charge", PermanentError("the charge is settled: refunds only by hand"))

    record = h.run_cleanup(flow_id)

    assert record.cleanup is not None and record.cleanup.state is CleanupState.ABANDONED
    assert record.cleanup.left == ["charge"]
    assert states(record) == [EffectState.UNDONE, EffectState.UNDO_FAILED]


def test_an_undo_put_off_by_an_open_breaker_does_not_hold_the_flows_end() -> None:
    api = Api()
    policy = BreakerPolicy(min_calls=2, failure_rate=0.5, open_s=30.0, max_open_s=30.0)
    limits = Limits(continue_inline=True, undo_window_s=WINDOW_S)
    h = Harness(
        saga(api, dependency="client-api"),
        limits=limits,
        dependencies=Dependencies(default=policy),
    )
    api.down = True
    flow_id = h.start("saga")

    ended = h.run(flow_id)

    assert ended is not None and ended.status is Status.FAILED
    assert ended.cleanup is not None and ended.cleanup.state is CleanupState.PENDING
    assert h.breaker("client-api").state == "open"
    assert any(e.outcome == "clean-up pending" for e in ended.history)
    api.down = False
    assert h.run_cleanup(flow_id).cleanup.state is CleanupState.DONE  # type: ignore[union-attr]
    assert api.live == set()


def test_with_no_undo_window_an_undo_that_keeps_failing_is_recorded_as_failed() -> None:
    api = Api()
    h = Harness(
        saga(api),
        limits=Limits(continue_inline=True, undo_window_s=0),
        dependencies=Dependencies.off(),
    )
    api.down = True
    ended = h.run(h.start("saga"))
    assert ended is not None and ended.cleanup is None
    assert ended.result is not None and ended.result.error is not None
    assert ended.result.error["compensation_failures"] == ["charge", "reserve"]


# -- ForEach items: a lane's undo that cannot be done now is left to its flow -----------------


def fleet(api: Api, *, tolerate: int) -> Flow:
    """Each item registers (undone by unregister), then is checked: item 1 is refused."""

    def register(ctx: StepContext) -> dict[str, str]:
        return {"id": api.create(ctx.idempotency_key)}

    def unregister(ctx: StepContext) -> dict[str, str]:
        api.delete(ctx.outputs["register"]["id"])
        return {}

    def check(ctx: StepContext) -> dict[str, bool]:
        if ctx.item_index == 1:
            raise PermanentError("item 1 is refused", code="REFUSED")
        return {"ok": True}

    return Flow(
        name="fleet",
        steps=(
            ForEach(
                "each",
                items=lambda ctx: [0, 1, 2],
                steps=(
                    ActionStep("register", register, retry=FAST, compensate=unregister),
                    ActionStep("check", check, retry=FAST),
                ),
                concurrency=3,
                tolerate=tolerate,
            ),
        ),
    )


def fleet_harness(api: Api, *, tolerate: int) -> Harness:
    limits = Limits(continue_inline=True, undo_window_s=WINDOW_S)
    return Harness(fleet(api, tolerate=tolerate), limits=limits, dependencies=Dependencies.off())


def test_a_flow_that_succeeds_cleans_up_what_its_failed_item_could_not_undo() -> None:
    api = Api()
    h = fleet_harness(api, tolerate=1)
    api.down = True  # only the failed item's undo calls it while it is down
    flow_id = h.start("fleet")

    ended = h.run(flow_id)

    assert ended is not None and ended.status is Status.SUCCEEDED
    assert ended.cleanup is not None and ended.cleanup.state is CleanupState.PENDING
    assert len(api.live) == 3  # item 1's registration: its undo was left to the flow
    api.down = False
    cleaned = h.run_cleanup(flow_id)
    assert cleaned.cleanup is not None and cleaned.cleanup.state is CleanupState.DONE
    assert len(api.live) == 2  # items 0 and 2 succeeded: theirs stay
    assert cleaned.status is Status.SUCCEEDED
    assert [c.context.item_index for c in h.calls if c.kind is TaskKind.COMPENSATE][-1] == 1


def test_a_flow_that_fails_undoes_what_its_failed_item_could_not() -> None:
    api = Api()
    h = fleet_harness(api, tolerate=0)
    api.down = True
    flow_id = h.start("fleet")

    ended = h.run(flow_id)

    assert ended is not None and ended.status is Status.FAILED
    assert ended.cleanup is not None and ended.cleanup.state is CleanupState.PENDING
    api.down = False
    cleaned = h.run_cleanup(flow_id)
    assert cleaned.cleanup is not None and cleaned.cleanup.state is CleanupState.DONE
    assert api.live == set()  # every item's registration undone, the failed one's too


def test_a_clean_up_waits_on_its_long_curve_or_longer_if_the_dependency_asks() -> None:
    # the sample flow's plan: undo_initial_s 30, doubling, at most undo_max_interval_s (1 h)
    record, undo_plan = started(), plan()
    for tries in range(10):
        nominal = min(30.0 * 2**tries, 3600.0)
        delay = cleanup_delay(undo_plan, record, tries=tries, error=RetryableError("503"))
        assert 0.8 * nominal <= delay <= min(1.2 * nominal, 3600.0), tries
    asks = RetryableError("429", retry_after_s=100.0)
    assert cleanup_delay(undo_plan, record, tries=0, error=asks) == 100.0
    greedy = RetryableError("429", retry_after_s=7200.0)
    assert cleanup_delay(undo_plan, record, tries=0, error=greedy) == 3600.0  # capped at an hour

"""engine against in-memory ports: the first dispatch of a flow's first step runs under the
claim the create took for it, writing no claim of its own; every other delivery claims."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from relayflow.core.engine import Limits, Ran
from relayflow.core.flows import StepContext
from relayflow.core.state import Status
from relayflow.web.services import _answered

from .support import Harness

LIMITS = Limits()
FIRST_CLAIM_S = LIMITS.claim_lease_s + LIMITS.first_delivery_within_s


def _die(ctx: StepContext) -> dict[str, Any]:
    raise SystemExit("killed mid-handler")  # not an Exception: nothing in the engine catches it


def test_a_first_dispatch_under_the_creates_claim_writes_no_claim(h: Harness) -> None:
    # given a flow just created, its first step claimed for its task's first dispatch
    h.start()
    assert h.store.writes == 1
    # when that dispatch runs it
    seen: list[Any] = []
    h.reserve.script = [lambda ctx: seen.append(h.record().claim) or {"reservation": "r-1"}]
    assert h.deliver() is Ran.ADVANCED
    # then the handler ran under the create's claim, and the commit was the only write
    assert seen[0] is not None and seen[0].first
    assert h.store.writes == 2
    record = h.record()
    assert record.position.step == "await_ready" and record.claim is None
    assert [(e.step, e.state.value) for e in record.effects] == [("reserve", "done")]


def test_a_redelivery_waits_out_the_first_claim_then_claims_and_counts_a_try(h: Harness) -> None:
    # given the first dispatch died inside reserve's handler (no write of its own)
    h.start()
    payload = h.next_payload()
    h.reserve.script = [_die, {"reservation": "r-1"}]
    with pytest.raises(SystemExit):
        h.engine.run_task(payload)
    assert h.store.writes == 1
    # when Cloud Tasks retries it within the first claim's lease, it is busy (it may still run)
    assert h.engine.run_task(payload, redelivery=True) is Ran.BUSY
    # and after the lease it claims, counting the dead dispatch as a try
    h.clock.advance(FIRST_CLAIM_S)
    seen: list[int] = []
    h.reserve.script = [lambda ctx: seen.append(h.record().uncommitted) or {"reservation": "r-1"}]
    assert h.engine.run_task(payload, redelivery=True) is Ran.ADVANCED
    assert seen == [1]
    assert len(h.reserve.calls) == 2
    # the same key both times: the external API made one registration
    assert h.reserve.calls[0].idempotency_key == h.reserve.calls[1].idempotency_key


def test_a_handler_that_kills_every_delivery_runs_out_of_attempts(h: Harness) -> None:
    # given reserve's handler kills its worker every time (RETRY allows 3 attempts)
    h.start()
    payload = h.next_payload()
    h.reserve.script = [_die]
    with pytest.raises(SystemExit):  # the first dispatch, under the create's claim
        h.engine.run_task(payload)
    # when Cloud Tasks keeps retrying it, each after the last one's lease
    for _ in range(2):
        h.clock.advance(FIRST_CLAIM_S)
        with pytest.raises(SystemExit):
            h.engine.run_task(payload, redelivery=True)
    h.clock.advance(FIRST_CLAIM_S)
    assert h.engine.run_task(payload, redelivery=True) is Ran.ADVANCED
    # then three deliveries ran it, and the flow failed HANDLER_CRASHED (and undid reserve)
    assert len(h.reserve.calls) == 3
    record = h.record()
    assert record.status is Status.COMPENSATING
    assert record.pending_result is not None and record.pending_result.code == "HANDLER_CRASHED"


def test_a_concurrent_duplicate_of_the_first_dispatch_runs_with_the_same_key_and_commits_never(
    h: Harness,
) -> None:
    # given the first dispatch of reserve is inside its handler when its duplicate arrives
    h.start()
    payload = h.next_payload()
    seen: list[Ran] = []

    def reserve_while_a_duplicate_arrives(ctx: StepContext) -> dict[str, Any]:
        if len(h.reserve.calls) == 1:
            seen.append(h.engine.run_task(payload))  # the duplicate: retry count 0 too
        return {"reservation": "r-1"}

    h.reserve.script = [reserve_while_a_duplicate_arrives]
    first = h.engine.run_task(payload)
    # then both called the API, under one idempotency key (so one registration) ...
    assert len(h.reserve.calls) == 2
    assert h.reserve.calls[0].idempotency_key == h.reserve.calls[1].idempotency_key
    # ... and only one commit landed: the duplicate's, which finished first; the first is stale
    assert seen == [Ran.ADVANCED] and first is Ran.STALE
    record = h.record()
    assert [e.outcome for e in record.history if e.step == "reserve"] == ["succeeded"]
    assert record.position.step == "await_ready"
    assert h.store.writes == 2  # the create and the one commit


def test_a_late_first_dispatch_claims_for_itself_at_once(h: Harness) -> None:
    # given the first dispatch comes when the create's claim no longer covers a whole lease
    h.start()
    h.clock.advance(LIMITS.first_delivery_within_s + 1)
    seen: list[Any] = []
    h.reserve.script = [lambda ctx: seen.append(h.record()) or {"reservation": "r-1"}]
    # when it runs, it is not busy: it claims (one write) and no try is counted
    assert h.deliver() is Ran.ADVANCED
    (during,) = seen
    assert during.claim is not None and not during.claim.first
    assert during.claim.until == h.clock.now() + timedelta(seconds=LIMITS.claim_lease_s)
    assert during.uncommitted == 0
    assert h.store.writes == 3  # the create, the claim, the commit


def test_a_retry_of_an_answered_dispatch_takes_the_first_claim_over_at_once(h: Harness) -> None:
    # given the first dispatch was answered without running (Cloud Run's 429, a 5xx)
    h.start()
    payload = h.next_payload()
    # when Cloud Tasks retries it, saying the attempt it retries got an answer
    seen: list[int] = []
    h.reserve.script = [lambda ctx: seen.append(h.record().uncommitted) or {"reservation": "r-1"}]
    # then it is not busy: nothing can still run under the claim, so it claims at once,
    # counting the answered attempt as a try (it may have run, then failed)
    assert h.engine.run_task(payload, redelivery=True, answered=True) is Ran.ADVANCED
    assert seen == [1]


@pytest.mark.parametrize(
    ("status", "answered"),
    [("500", True), ("429", True), ("503", True), ("504", False), ("", False), ("0", False)],
)
def test_only_an_http_answer_but_a_timeout_says_the_attempt_is_over(
    status: str, answered: bool
) -> None:
    headers = {"X-CloudTasks-TaskPreviousResponse": status} if status else {}
    assert _answered(headers) is answered

"""engine against in-memory ports: claims: one delivery at a time runs a side effect."""

from __future__ import annotations

from typing import Any

import pytest

from relayflow.core.engine import Limits, Ran
from relayflow.core.flows import (
    StepContext,
)

from .support import Harness

# Later than a first claim lets its task's first dispatch run under it (Limits defaults).
LATE_S = Limits().first_delivery_within_s + 1


def test_a_second_delivery_while_the_first_runs_is_busy_and_calls_nothing(h: Harness) -> None:
    # given the first delivery of ``reserve`` is inside its handler (holding the claim) ...
    h.start()
    # (its first dispatch comes later than the create's claim for it covers: it claims itself)
    h.clock.advance(LATE_S)
    payload = h.next_payload()
    seen: list[Ran] = []

    def reserve_while_a_duplicate_arrives(ctx: StepContext) -> dict[str, Any]:
        seen.append(h.engine.run_task(payload))  # ... when the duplicate is delivered
        return {"reservation": "r-1"}

    h.reserve.script = [reserve_while_a_duplicate_arrives]
    first = h.engine.run_task(payload)
    # then the duplicate was told to come back (409) without calling the API; the first commits
    assert seen == [Ran.BUSY]
    assert first is Ran.ADVANCED
    assert len(h.reserve.calls) == 1
    assert h.record().claim is None  # a commit releases the claim
    # and when the duplicate comes back later it is stale
    assert h.engine.run_task(payload) is Ran.STALE


def test_a_claim_left_by_a_delivery_that_died_expires(h: Harness) -> None:
    # given a delivery claimed ``reserve`` and died before committing
    h.start()
    # (its first dispatch comes later than the create's claim for it covers: it claims itself)
    h.clock.advance(LATE_S)
    payload = h.next_payload()
    h.reserve.script = [_die]
    with pytest.raises(SystemExit):
        h.engine.run_task(payload)
    assert h.record().claim is not None
    # when Cloud Tasks retries within the lease, it is busy; after the lease, it runs
    h.reserve.script = [{"reservation": "r-1"}]
    assert h.engine.run_task(payload) is Ran.BUSY
    h.clock.advance(151)
    assert h.engine.run_task(payload) is Ran.ADVANCED
    assert len(h.reserve.calls) == 2


def test_a_poll_claims_nothing_because_reading_has_no_side_effect(h: Harness) -> None:
    h.start()
    h.deliver()  # reserve
    claims: list[object] = []
    h.await_ready.script = [lambda ctx: claims.append(h.record().claim) or {"state": "READY"}]
    h.deliver()
    assert claims == [None]


def _die(ctx: StepContext) -> dict[str, Any]:
    raise SystemExit("killed mid-handler")  # not an Exception: nothing in the engine catches it

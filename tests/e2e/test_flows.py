"""End to end on the local stack: Pub/Sub start, Cloud Run services, Cloud Tasks, Firestore."""

from __future__ import annotations

import itertools
import json
import shlex
import subprocess
from collections.abc import Callable
from datetime import timedelta

import pytest

from relayflow.core.flows import PollPolicy
from relayflow.core.position import TaskKind
from relayflow.core.state import Status
from tests.e2e.conftest import FAST_POLICIES, Harness

pytestmark = pytest.mark.e2e

POLICY = PollPolicy(
    initial_s=float(FAST_POLICIES["RELAYFLOW_POLL_INITIAL_S"]),
    multiplier=float(FAST_POLICIES["RELAYFLOW_POLL_MULTIPLIER"]),
    max_interval_s=float(FAST_POLICIES["RELAYFLOW_POLL_MAX_INTERVAL_S"]),
)
# How late after its schedule_time a poll may run: dispatch lag plus handler time, generously.
LATENESS_S = 1.0


def test_published_flow_succeeds_with_its_result(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    # given a registration flow published to flow-requests
    flow_id = new_id("ok")
    before = harness.side_effects()
    harness.publish({"flow": "registration", "flow_id": flow_id, "input": {"resource": flow_id}})

    # when it runs to the end
    record = harness.wait_terminal(flow_id)

    # then it SUCCEEDED with the entity it created, and did each side effect once
    assert record.status is Status.SUCCEEDED
    assert record.result is not None and record.result.code == "OK"
    data = record.result.data or {}
    assert data["name"] == f"{flow_id}-entity"  # the final step's output is the result
    assert data["entity_id"].startswith("ent_")
    assert record.outputs["await_registration"]["status"] == "ACTIVE"
    after = harness.side_effects()
    assert after["registrations_created"] - before["registrations_created"] == 1
    assert after["entities_created"] - before["entities_created"] == 1
    assert [h.step for h in record.history if h.kind is TaskKind.ACTION] == [
        "register",
        "create_entity",
    ]


def test_polls_follow_the_backoff_schedule_within_the_jitter_band(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    # given a registration that takes 5 s to become active
    flow_id = new_id("backoff")
    harness.client_api("POST", "/admin/config", json={"resource_delays": {flow_id: 5.0}})
    harness.publish({"flow": "registration", "flow_id": flow_id, "input": {"resource": flow_id}})

    # when the flow ends
    record = harness.wait_terminal(flow_id)

    # then each poll waited the exact deterministic delay for its number, within ±20% of the
    # nominal curve, and ran no earlier than scheduled (and not much later)
    assert record.status is Status.SUCCEEDED
    polls = [h for h in record.history if h.kind is TaskKind.POLL]
    assert len(polls) >= 4
    for n, (this, following) in enumerate(itertools.pairwise(polls)):
        assert this.poll == n
        expected = POLICY.delay_s(n=n, key=f"{flow_id}:await_registration")
        nominal = min(POLICY.initial_s * POLICY.multiplier**n, POLICY.max_interval_s)
        assert this.delay_s == pytest.approx(expected, abs=0.001)
        assert nominal * 0.8 - 0.001 <= this.delay_s <= min(nominal * 1.2, POLICY.max_interval_s)
        gap = (following.at - this.at).total_seconds()
        assert this.delay_s - 0.05 <= gap <= this.delay_s + LATENESS_S


def test_registration_slower_than_the_deadline_times_out(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    # given a registration that never becomes active, and a 3 s deadline
    flow_id = new_id("slow")
    harness.client_api("POST", "/admin/config", json={"resource_delays": {flow_id: None}})
    before = harness.side_effects()
    body = {"flow": "registration", "flow_id": flow_id, "input": {"resource": flow_id}}
    harness.publish({**body, "deadline_s": 3})

    # when it ends
    record = harness.wait_terminal(flow_id)

    # then it TIMED_OUT (not FAILED) no later than deadline + max interval, and the
    # registration it made was compensated
    assert record.status is Status.TIMED_OUT
    assert record.result is not None and record.result.code == "DEADLINE_EXCEEDED"
    assert record.finished_at is not None
    took = record.finished_at - record.created_at
    assert timedelta(seconds=3) <= took <= timedelta(seconds=3 + POLICY.max_interval_s)
    after = harness.side_effects()
    assert after["registrations_cancelled"] - before["registrations_cancelled"] == 1


def test_business_rejection_fails_the_flow_with_its_code(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    flow_id = new_id("rej")
    harness.publish(
        {"flow": "registration", "flow_id": flow_id, "input": {"resource": f"reject-{flow_id}"}}
    )
    record = harness.wait_terminal(flow_id)
    assert record.status is Status.FAILED
    assert record.result is not None and record.result.code == "REJECTED"
    assert record.attempts == 1  # a permanent error is not retried


def test_transient_client_errors_are_retried_honouring_retry_after(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    # given the client API answers 503 with Retry-After: 1 twice, then works
    flow_id = new_id("retry")
    rule = {"method": "POST", "path_prefix": "/registrations", "status": 503}
    harness.client_api("POST", "/admin/faults", json=[{**rule, "retry_after_s": 1, "count": 2}])
    harness.publish({"flow": "registration", "flow_id": flow_id, "input": {"resource": flow_id}})

    record = harness.wait_terminal(flow_id)

    # then the flow succeeded on the third attempt, each retry waiting at least Retry-After
    assert record.status is Status.SUCCEEDED
    retries = [h for h in record.history if h.step == "register" and h.outcome != "succeeded"]
    assert [h.attempt for h in retries] == [0, 1]
    assert all(h.delay_s is not None and h.delay_s >= 1.0 for h in retries)


def test_a_flow_published_with_gcloud_runs(harness: Harness, new_id: Callable[[str], str]) -> None:
    # given the gcloud CLI pointed at the emulator the way the README says (the stack's env file)
    flow_id = new_id("gcloud")
    message = json.dumps(
        {"flow": "registration", "flow_id": flow_id, "input": {"resource": flow_id}}
    )
    # when it publishes the start message
    subprocess.run(
        ["bash", "-c", f'source "{harness.stack.env_file}" && '
         f"gcloud pubsub topics publish flow-requests --message={shlex.quote(message)} --quiet"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    # then the flow runs to its end
    assert harness.wait_terminal(flow_id).status is Status.SUCCEEDED

"""Tenants and dependencies on the whole local stack: a limited tenant's flows wait for its
quota and all succeed, never more running than it; a high-priority tenant's tasks take the
high queues; operators pause and resume a tenant through the CLI; a client API outage opens
the shared breaker, steps are put off without spending attempts, and every flow succeeds
once it is back."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import requests

from relayflow.core.records import FlowRecord
from relayflow.core.state import Status
from relayflow.local.polling import poll_until
from tests.e2e.conftest import Harness
from tests.e2e.test_cli import _run

pytestmark = pytest.mark.e2e


def _api(harness: Harness, path: str) -> Any:
    response = requests.get(harness.url(harness.ports.api, path), timeout=10)
    response.raise_for_status()
    return response.json()


def _start(harness: Harness, flow_id: str, tenant: str) -> None:
    """Start a flow of ``tenant`` as its publishers do: on its own topic (the default
    tenant's is flow-requests)."""
    body = {"flow": "registration", "flow_id": flow_id, "input": {"resource": flow_id}}
    topic = "flow-requests" if tenant == "default" else f"flow-requests.{tenant}"
    harness.publish({**body, "tenant": tenant}, topic=topic)


def test_a_start_naming_a_tenant_on_the_shared_topic_is_rejected_and_recorded(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    flow_id = new_id("forged")
    body = {"flow": "registration", "flow_id": flow_id, "input": {"resource": flow_id}}
    message_id = harness.publish(body, tenant="e2e-limited")  # as an attribute, on flow-requests

    def recorded() -> bool:
        return harness.store.rejected(message_id) is not None

    assert poll_until(recorded, timeout_s=30)
    rejected = harness.store.rejected(message_id)
    assert rejected is not None and "flow-requests.e2e-limited" in rejected["reason"]
    assert harness.flow(flow_id) is None


def _most_running(records: list[FlowRecord]) -> int:
    edges = []
    for r in records:
        admitted = next((e.at for e in r.history if e.outcome == "admitted"), r.created_at)
        assert r.finished_at is not None
        edges += [(admitted.timestamp(), 1), (r.finished_at.timestamp(), -1)]
    running = most = 0
    for _, step in sorted(edges):
        running += step
        most = max(most, running)
    return most


def test_a_limited_tenants_flows_wait_for_its_quota_and_all_succeed(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    ids = [new_id("quota") for _ in range(6)]
    for flow_id in ids:
        _start(harness, flow_id, "e2e-limited")
    records = [harness.wait_terminal(flow_id, timeout_s=120) for flow_id in ids]
    assert {r.status for r in records} == {Status.SUCCEEDED}
    assert {r.tenant for r in records} == {"e2e-limited"}
    assert _most_running(records) <= 2  # the quota
    waited = [r for r in records if any(e.outcome == "admitted" for e in r.history)]
    assert len(waited) >= 4  # six starts, two slots: at least four waited their turn
    listed = _api(harness, "/flows?tenant=e2e-limited&limit=500")["flows"]
    assert set(ids) <= {f["flow_id"] for f in listed}


def test_a_high_priority_tenants_tasks_take_the_high_queues(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    flow_id = new_id("high")
    harness.client_api("POST", "/admin/config", json={"resource_delays": {flow_id: 4.0}})
    _start(harness, flow_id, "e2e-high")
    queues: set[str] = set()

    def polling() -> bool:
        record = harness.flow(flow_id)
        if record is not None and record.next is not None:
            queues.add(record.next.queue)
        return "flow-polls-high" in queues

    assert poll_until(polling, timeout_s=30)
    record = harness.wait_terminal(flow_id)
    assert record.status is Status.SUCCEEDED and record.priority == "high"
    assert queues <= {"flow-steps-high", "flow-polls-high"}


def test_operators_pause_and_resume_a_tenant_with_the_cli(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    paused = _run(harness, "tenants", "pause", "e2e-paused", "--reason", "maintenance")
    assert paused.returncode == 0, paused.stderr
    assert "tenant e2e-paused paused by local: maintenance" in paused.stdout
    flow_id = new_id("paused")
    _start(harness, flow_id, "e2e-paused")

    def put_off() -> bool:
        record = harness.flow(flow_id)
        return record is not None and any(e.outcome == "deferred" for e in record.history)

    assert poll_until(put_off, timeout_s=30)
    listed = _run(harness, "tenants", "list")
    assert listed.returncode == 0, listed.stderr
    (row,) = [line for line in listed.stdout.splitlines() if line.startswith("e2e-paused")]
    assert "paused by local: maintenance" in row
    resumed = _run(harness, "tenants", "resume", "e2e-paused", "--reason", "done")
    assert resumed.returncode == 0, resumed.stderr
    assert "1 put-off task(s) brought forward now" in resumed.stdout
    # brought forward: it goes on at once, not at the end of its 30 s put-off
    record = harness.wait_terminal(flow_id, timeout_s=20)
    assert record.status is Status.SUCCEEDED
    assert record.attempts == 2  # register and create_entity, once each: nothing spent


def test_an_outage_opens_the_breaker_puts_steps_off_and_every_flow_succeeds(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    # given every poll of the client API fails
    down = {"method": "GET", "path_prefix": "/registrations", "status": 503, "count": None}
    harness.client_api("POST", "/admin/faults", json=[down])
    ids = [new_id("outage") for _ in range(12)]
    for flow_id in ids:
        _start(harness, flow_id, "default")

    # then the shared breaker opens, and steps are put off rather than failed
    def breaker() -> dict[str, Any]:
        (found,) = [
            b for b in _api(harness, "/breakers")["breakers"] if b["dependency"] == "client-api"
        ]
        return dict(found)

    assert poll_until(lambda: breaker()["state"] == "open", timeout_s=60)
    shown = _run(harness, "breakers")
    assert shown.returncode == 0 and "client-api" in shown.stdout, shown.stderr

    def deferred() -> bool:
        records = [harness.flow(flow_id) for flow_id in ids]
        return any(
            r is not None and any(e.outcome == "deferred" for e in r.history) for r in records
        )

    assert poll_until(deferred, timeout_s=30)

    # when the client API is back, every flow succeeds and the breaker closes
    harness.client_api("DELETE", "/admin/faults")
    records = [harness.wait_terminal(flow_id, timeout_s=120) for flow_id in ids]
    assert {r.status for r in records} == {Status.SUCCEEDED}
    assert all(r.attempts == 2 for r in records)  # no action retried or spent by the outage
    assert poll_until(lambda: breaker()["state"] == "closed", timeout_s=60)
    assert [t["to"] for t in breaker()["transitions"]][-1] == "closed"
    assert json.dumps(breaker())  # the api answers it as JSON

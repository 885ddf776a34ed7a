"""The api service: read flows, list them, cancel and retry them, with clear errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import requests

from relayflow.core.state import Status
from relayflow.local.polling import poll_until
from tests.e2e.conftest import Harness

pytestmark = pytest.mark.e2e


def _api(harness: Harness, method: str, path: str) -> requests.Response:
    # A change of state carries a JSON body, as the api's request guard asks of every caller.
    body = {"json": {}} if method != "GET" else {}
    return requests.request(method, harness.url(harness.ports.api, path), timeout=10, **body)


def _start(harness: Harness, flow_id: str, **extra: Any) -> None:
    body = {"flow": "registration", "flow_id": flow_id, "input": {"resource": flow_id}}
    harness.publish({**body, **extra})


def test_get_flow_returns_the_document(harness: Harness, new_id: Callable[[str], str]) -> None:
    flow_id = new_id("api")
    _start(harness, flow_id)
    harness.wait_terminal(flow_id)
    response = _api(harness, "GET", f"/flows/{flow_id}")
    assert response.status_code == 200
    doc = response.json()
    assert doc["flow_id"] == flow_id
    assert doc["status"] == "SUCCEEDED"
    assert doc["result"]["code"] == "OK"


@pytest.mark.parametrize(
    ("path", "status", "says"),
    [
        ("/flows/no-such-flow", 404, "no flow with id 'no-such-flow'"),
        ("/flows/bad%20id", 400, "flow id must match"),
        ("/flows?status=sleeping", 400, "status 'sleeping' is not one of"),
        ("/flows?limit=0", 400, "limit must be an integer"),
        ("/nowhere", 404, "no route GET /nowhere"),
    ],
)
def test_bad_requests_get_clear_errors(harness: Harness, path: str, status: int, says: str) -> None:
    response = _api(harness, "GET", path)
    assert response.status_code == status
    assert says in response.json()["error"]["message"]


def test_list_filters_by_status(harness: Harness, new_id: Callable[[str], str]) -> None:
    ok, bad = new_id("list-ok"), new_id("list-bad")
    _start(harness, ok)
    harness.publish({"flow": "registration", "flow_id": bad, "input": {"resource": "reject-x"}})
    harness.wait_terminal(ok)
    harness.wait_terminal(bad)
    failed = _api(harness, "GET", "/flows?status=failed&limit=500").json()["flows"]
    assert bad in {f["flow_id"] for f in failed}
    assert all(f["status"] == "FAILED" for f in failed)
    assert ok not in {f["flow_id"] for f in failed}


def test_cancel_stops_a_waiting_flow(harness: Harness, new_id: Callable[[str], str]) -> None:
    # given a flow polling a registration that does not activate
    flow_id = new_id("cancel")
    harness.client_api("POST", "/admin/config", json={"resource_delays": {flow_id: None}})
    before = harness.side_effects()
    _start(harness, flow_id)
    assert poll_until(lambda: harness.polls_shown(flow_id) >= 1, timeout_s=20)

    # when it is cancelled
    cancelled = _api(harness, "POST", f"/flows/{flow_id}:cancel")

    # then its registration is undone and it is CANCELLED; its pending poll is a no-op, and a
    # second cancel is refused
    assert cancelled.status_code == 200, cancelled.text
    record = harness.wait_terminal(flow_id)
    assert record.status is Status.CANCELLED
    assert [h.outcome for h in record.history if h.kind == "compensate"] == ["compensated"]
    cancelled_regs = harness.side_effects()["registrations_cancelled"]
    assert cancelled_regs == before["registrations_cancelled"] + 1
    again = _api(harness, "POST", f"/flows/{flow_id}:cancel")
    assert again.status_code == 409
    assert "illegal transition CANCELLED -> CANCELLED" in again.json()["error"]["message"]


def test_a_failed_flow_is_compensated_and_a_retry_runs_a_new_generation(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    # given the client API refuses the next entity creation with a permanent 400
    flow_id = new_id("saga")
    fault = {"method": "POST", "path_prefix": "/entities", "status": 400, "count": 1}
    harness.client_api("POST", "/admin/faults", json=[fault])
    before = harness.side_effects()
    _start(harness, flow_id)

    # when the flow fails at create_entity
    failed = harness.wait_terminal(flow_id)

    # then it FAILED with the client's error and its registration was undone (saga)
    assert failed.status is Status.FAILED
    assert failed.result is not None and failed.result.error is not None
    assert failed.result.error["step"] == "create_entity"
    assert [h.outcome for h in failed.history if h.kind == "compensate"] == ["compensated"]
    assert (
        harness.side_effects()["registrations_cancelled"] == before["registrations_cancelled"] + 1
    )

    # when it is retried, then a new generation registers afresh and SUCCEEDS
    retried = _api(harness, "POST", f"/flows/{flow_id}:retry")
    assert retried.status_code == 200, retried.text
    assert retried.json()["position"]["generation"] == 1

    def succeeded() -> bool:
        record = harness.store.get(flow_id)
        return record is not None and record.status is Status.SUCCEEDED

    assert poll_until(succeeded, timeout_s=30)
    after = harness.side_effects()
    assert after["registrations_created"] == before["registrations_created"] + 2
    assert after["entities_created"] == before["entities_created"] + 1

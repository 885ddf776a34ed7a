"""Every shape of flow on the whole local stack, with the reference app's `fleet` flow: a
ForEach of callback steps (10 at a time, the fake client API calling back), an If on how many
activated, a join. Parallel items overlap in time, outputs come back in order, a callback
resumes its item within a second, a duplicate or late one changes nothing, a lost one is
caught by the safety-net poll, a missing one times out."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
import requests

from relayflow.core.records import FlowRecord
from relayflow.core.state import Status
from relayflow.local.polling import poll_until
from tests.e2e.conftest import Harness

pytestmark = pytest.mark.e2e


def fleet(harness: Harness, flow_id: str, resources: list[str], **extra: Any) -> FlowRecord:
    body: dict[str, Any] = {"flow": "fleet", "flow_id": flow_id, "input": {"resources": resources}}
    body["input"].update(extra.pop("input", {}))
    harness.publish({**body, **extra})
    return harness.wait_terminal(flow_id, timeout_s=120)


def configure(harness: Harness, **config: Any) -> None:
    harness.client_api("POST", "/admin/config", json=config)


def lane(harness: Harness, flow_id: str, k: int) -> FlowRecord:
    record = harness.store.get(f"{flow_id}.register_all.{k}")
    assert record is not None
    return record


def test_items_run_in_parallel_ten_at_a_time_and_join_in_order(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    flow_id = new_id("fleet")
    resources = [f"{flow_id}-{i}" for i in range(12)]
    configure(harness, resource_delays=dict.fromkeys(resources, 2.0))
    record = fleet(harness, flow_id, resources)
    assert record.status is Status.SUCCEEDED, record.result
    items = record.outputs["register_all"]["items"]
    assert [item["resource"] for item in items] == resources  # the list's order
    assert len(record.lanes) == 10  # concurrency 10: at most 10 items at once
    # 12 activations of 2 s each, run one after another, would take 24 s; in parallel lanes
    # (items 0-9 together, then 10-11) they take about two activation delays
    assert record.finished_at is not None
    assert (record.finished_at - record.created_at).total_seconds() < 12
    assert record.outputs["enough"] == {"branch": "then"}
    assert record.skipped == ["report_shortfall"]
    # the api shows where each item is: lane 0 ran items 0 and 10, lane 1 items 1 and 11
    url = harness.url(harness.ports.api, f"/flows/{flow_id}/lanes")
    lanes = {lane["lane_id"]: lane for lane in requests.get(url, timeout=10).json()["lanes"]}
    first = lanes[f"{flow_id}.register_all.0"]
    assert (first["items"], first["done"], first["status"]) == ([0, 10], [0, 10], "SUCCEEDED")


def test_an_if_skips_the_branch_not_taken(harness: Harness, new_id: Callable[[str], str]) -> None:
    flow_id = new_id("short")
    before = harness.side_effects()
    record = fleet(harness, flow_id, [f"{flow_id}-a"], input={"min_active": 2})
    assert record.status is Status.SUCCEEDED
    assert record.skipped == ["create_group"]
    assert record.outputs["report_shortfall"] == {"active": 1, "wanted": 2}
    assert harness.side_effects()["entities_created"] == before["entities_created"]


def test_a_callback_resumes_its_item_within_a_second(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    flow_id = new_id("quick")
    resource = f"{flow_id}-a"
    configure(harness, resource_delays={resource: 1.0}, callback_modes={resource: "on_time"})
    record = fleet(harness, flow_id, [resource])
    assert record.status is Status.SUCCEEDED
    item = record.outputs["register_all"]["items"][0]
    assert "via" not in item  # the callback completed it, not the safety net
    activated = datetime.fromisoformat(item["activated_at"])
    resumed = next(e.at for e in lane(harness, flow_id, 0).history if e.outcome == "completed")
    assert 0 <= (resumed - activated).total_seconds() < 1.0


def test_a_duplicate_or_late_callback_changes_nothing_and_says_why(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    flow_id = new_id("twice")
    resource = f"{flow_id}-a"
    # no callback from the API, and no activation: the item waits for us to complete it
    configure(harness, resource_delays={resource: None}, callback_modes={resource: "never"})
    harness.publish({"flow": "fleet", "flow_id": flow_id, "input": {"resources": [resource]}})
    tokens: list[str] = []

    def waiting() -> bool:
        found = harness.store.get(f"{flow_id}.register_all.0")
        track = found.tracks.get("activate") if found else None
        if track is not None and track.token and track.position.kind == "wait":
            tokens.append(track.token)
            return True
        return False

    assert poll_until(waiting, timeout_s=30, interval_s=0.2)
    # the token goes in the body or a header of POST /callbacks, never in the URL
    url = harness.url(harness.ports.api, "/callbacks")
    in_url = requests.post(f"{url}/{tokens[0]}", json={}, timeout=10)
    assert in_url.status_code == 410 and "never in the URL" in in_url.json()["error"]["message"]
    first = requests.post(
        url,
        json={"registration_id": "by-hand", "resource": resource},
        headers={"X-Relayflow-Callback-Token": tokens[0]},
        timeout=10,
    )
    again = requests.post(url, json={"token": tokens[0], "registration_id": "again"}, timeout=10)
    assert first.status_code == 200 and first.json()["outcome"] == "completed"
    assert again.status_code == 409 and "completed already" in again.json()["reason"]
    record = harness.wait_terminal(flow_id, timeout_s=60)
    assert record.outputs["register_all"]["items"][0]["registration_id"] == "by-hand"
    late = requests.post(url, json={"token": tokens[0]}, timeout=10)
    assert late.status_code == 409 and "ended" in late.json()["reason"]


def test_the_safety_net_poll_completes_an_item_whose_callback_was_lost(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    flow_id = new_id("lost")
    resource = f"{flow_id}-a"
    configure(harness, resource_delays={resource: 0.5}, callback_modes={resource: "never"})
    record = fleet(harness, flow_id, [resource])
    assert record.status is Status.SUCCEEDED
    assert record.outputs["register_all"]["items"][0]["via"] == "poll"


def test_a_missing_callback_times_out_and_undoes_the_registration(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    flow_id = new_id("never")
    resource = f"{flow_id}-a"
    configure(harness, resource_delays={resource: None}, callback_modes={resource: "never"})
    before = harness.side_effects()
    record = fleet(harness, flow_id, [resource], deadline_s=5)
    assert record.status is Status.TIMED_OUT
    item = lane(harness, flow_id, 0)
    assert item.failed_items == [0]
    assert any("CALLBACK_TIMEOUT" in e.detail or "callback" in e.detail for e in item.history)
    after = harness.side_effects()
    assert after["registrations_cancelled"] - before["registrations_cancelled"] == 1


def test_a_retry_runs_again_the_items_its_timed_out_run_undid(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    # given a fleet flow that timed out awaiting an item's callback, the registration undone
    flow_id = new_id("again")
    resource = f"{flow_id}-a"
    configure(harness, resource_delays={resource: None}, callback_modes={resource: "never"})
    before = harness.side_effects()
    first = fleet(harness, flow_id, [resource], deadline_s=5)
    assert first.status is Status.TIMED_OUT

    # when the resource activates now and an operator retries the flow through the api
    configure(harness, resource_delays={resource: 0.5}, callback_modes={resource: "on_time"})
    url = harness.url(harness.ports.api, f"/flows/{flow_id}:retry")
    retried = requests.post(url, json={"reason": "activation fixed"}, timeout=10)
    assert retried.status_code == 200, retried.text

    # then the item registers again in a lane of the new generation and the flow succeeds
    def succeeded() -> bool:
        record = harness.store.get(flow_id)
        return record is not None and record.status is Status.SUCCEEDED

    assert poll_until(succeeded, timeout_s=60), harness.store.get(flow_id)
    record = harness.store.get(flow_id)
    assert record is not None and record.lanes == [f"{flow_id}.register_all.0.g1"]
    assert record.outputs["register_all"]["items"][0]["resource"] == resource
    after = harness.side_effects()
    assert after["registrations_created"] - before["registrations_created"] == 2
    assert after["registrations_cancelled"] - before["registrations_cancelled"] == 1

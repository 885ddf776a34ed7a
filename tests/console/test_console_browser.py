"""The console in a real browser against a running local stack: the list shows flows of each
status; a flow's page shows its polls with their delays in order, live; cancel, retry and reset
to a step from the page; a replayed dead letter starts its flow; the services' metrics count the
flows."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import requests
from google.pubsub_v1 import PubsubMessage
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from relayflow.core.records import FlowRecord
from relayflow.core.state import ACTIVE, Status
from relayflow.local.clients import publisher_client
from relayflow.local.polling import poll_until

from .conftest import Console

pytestmark = pytest.mark.e2e


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def start(console: Console, flow_id: str, *, resource: str | None = None, **extra: Any) -> None:
    body = {"flow": "registration", "flow_id": flow_id, "input": {"resource": resource or flow_id}}
    console.h.publish({**body, **extra})


def never_activates(console: Console, *resources: str) -> None:
    delays = dict.fromkeys(resources)
    console.h.client_api("POST", "/admin/config", json={"resource_delays": delays})


def activates_after(console: Console, resource: str, seconds: float) -> None:
    config = {"resource_delays": {resource: seconds}}
    console.h.client_api("POST", "/admin/config", json=config)


def polled(console: Console, flow_id: str, times: int = 1) -> FlowRecord:
    found: list[FlowRecord] = []

    def enough() -> bool:
        # A poll chain writes its polls at checkpoints; the api shows those in flight too.
        record = console.h.store.get(flow_id)
        if record is None:
            return False
        shown = requests.get(console.url(f"/flows/{flow_id}"), timeout=10)
        in_flight = len(shown.json().get("polls_in_flight") or []) if shown.ok else 0
        if record.polls + in_flight >= times:
            found.append(record)
        return bool(found)

    assert poll_until(enough, timeout_s=30), f"{flow_id} never polled {times} times"
    return found[0]


def status_shown(flow_id: str, status: Status) -> Callable[[WebDriver], bool]:
    """The flow's page shows ``status`` (without a reload: the live view refreshed it)."""

    def shown(driver: WebDriver) -> bool:
        badges = driver.find_elements(By.CSS_SELECTOR, f'#flow[data-status="{status.value}"]')
        return bool(badges) and flow_id in driver.find_element(By.CSS_SELECTOR, "#flow h1").text

    return shown


def confirm_with_reason(console: Console, button: str, reason: str) -> None:
    console.click(button)  # the flow's live view may be replacing it
    console.find("reason").send_keys(reason)
    console.driver.find_element(By.ID, "confirm").click()


def test_the_list_shows_flows_of_each_status(console: Console) -> None:
    # given one flow of each kind of end, and one still running
    ids = {s: new_id(f"list-{s.value.lower()}") for s in Status if s is not Status.PENDING}
    ids.pop(Status.COMPENSATING)
    never_activates(console, ids[Status.RUNNING], ids[Status.TIMED_OUT], ids[Status.CANCELLED])
    start(console, ids[Status.SUCCEEDED])
    order = new_id("ORD")
    labels = {"order_id": order, "region": "eu"}
    start(console, ids[Status.FAILED], resource=f"reject-{ids[Status.FAILED]}", labels=labels)
    start(console, ids[Status.TIMED_OUT], deadline_s=2)
    start(console, ids[Status.RUNNING])
    start(console, ids[Status.CANCELLED])
    polled(console, ids[Status.CANCELLED])
    cancel = requests.post(
        console.url(f"/flows/{ids[Status.CANCELLED]}:cancel"), json={"reason": "t"}, timeout=10
    )
    assert cancel.status_code == 200, cancel.text
    for status in (Status.SUCCEEDED, Status.FAILED, Status.TIMED_OUT, Status.CANCELLED):
        assert console.h.wait_terminal(ids[status]).status is status
    polled(console, ids[Status.RUNNING])

    # when the console lists the flows
    console.open("/console/flows?limit=500")

    # then each is there with its status, and the counts say there is one of each at least
    rows = console.read(
        lambda d: {
            row.get_attribute("data-flow-id"): row.get_attribute("data-status")
            for row in d.find_elements(By.CSS_SELECTOR, "tr.flow-row")
        }
    )
    assert {rows.get(flow_id) for flow_id in ids.values()} == {s.value for s in ids}
    counts = console.read(
        lambda d: {
            link.get_attribute("data-status"): int(link.find_element(By.CLASS_NAME, "n").text)
            for link in d.find_elements(By.CSS_SELECTOR, "#counts a")
        }
    )
    assert all(counts[s.value] >= 1 for s in ids)
    console.screenshot("console-flows.png")

    # and the filter form narrows the list to one status
    Select(console.driver.find_element(By.NAME, "status")).select_by_value("FAILED")
    console.driver.find_element(By.CSS_SELECTOR, "#filters button").click()
    console.arrived("status=FAILED")
    statuses = console.read(
        lambda d: {
            r.get_attribute("data-status") for r in d.find_elements(By.CSS_SELECTOR, "tr.flow-row")
        }
    )
    assert statuses == {"FAILED"}

    # and the label field (two labels, a space between) finds the flow started with them
    Select(console.driver.find_element(By.NAME, "status")).select_by_value("")
    console.driver.find_element(By.ID, "label-filter").send_keys(f"order_id={order} region=eu")
    console.driver.find_element(By.CSS_SELECTOR, "#filters button").click()
    console.arrived("label=")
    rows = console.read(
        lambda d: {
            row.get_attribute("data-flow-id"): row.text
            for row in d.find_elements(By.CSS_SELECTOR, "tr.flow-row")
        }
    )
    assert list(rows) == [ids[Status.FAILED]] and f"order_id={order}" in rows[ids[Status.FAILED]]
    field = console.driver.find_element(By.ID, "label-filter")  # the browser checks it first
    valid = "arguments[0].value = arguments[1]; return arguments[0].checkValidity();"
    assert console.driver.execute_script(valid, field, "order_id=1 region=eu") is True
    assert console.driver.execute_script(valid, field, "Order=1") is False

    # (the running flow is cancelled, so that it does not end during the tests after this one)
    requests.post(console.url(f"/flows/{ids[Status.RUNNING]}:cancel"), json={}, timeout=10)
    console.h.wait_terminal(ids[Status.RUNNING])


def test_a_flows_page_shows_its_polls_with_their_delays_in_order_live(console: Console) -> None:
    # given a flow whose registration activates after a few polls
    flow_id = new_id("timeline")
    activates_after(console, flow_id, 4.0)
    start(console, flow_id)
    polled(console, flow_id)

    # when its page is open while it runs
    console.open(f"/console/flows/{flow_id}")
    assert console.driver.find_element(By.ID, "flow").get_attribute("data-active") == "true"

    # then the page follows it to its end without a reload
    console.wait(status_shown(flow_id, Status.SUCCEEDED))
    record = console.h.wait_terminal(flow_id)

    # and shows each poll, in order, with the delay the planner chose after it
    shown = console.read(
        lambda d: [
            (int(r.get_attribute("data-poll")), r.get_attribute("data-delay"))
            for r in d.find_elements(By.CSS_SELECTOR, 'tr.entry[data-kind="poll"]')
        ]
    )
    stored = [(e.poll, e.delay_s) for e in record.history if e.kind == "poll"]
    assert [poll for poll, _ in shown] == list(range(len(stored))) and len(stored) >= 3
    assert [float(d) if d else None for _, d in shown] == [delay for _, delay in stored]
    waits = console.read(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#timeline g.wait text")))
    assert waits == sum(1 for _, delay in stored if delay is not None)


def test_cancel_from_the_page_compensates_the_flow(console: Console) -> None:
    # given a flow polling a registration that never activates
    flow_id = new_id("cancel")
    never_activates(console, flow_id)
    before = console.h.side_effects()["registrations_cancelled"]
    start(console, flow_id)
    polled(console, flow_id)

    # when an operator cancels it from its page, saying why
    console.open(f"/console/flows/{flow_id}")
    confirm_with_reason(console, "cancel", "customer withdrew the order")

    # then the page shows it cancelled, its registration was undone, and the history says
    # who cancelled it and why
    console.wait(status_shown(flow_id, Status.CANCELLED))
    record = console.h.wait_terminal(flow_id)
    assert record.status is Status.CANCELLED
    assert [e.outcome for e in record.history if e.kind == "compensate"] == ["compensated"]
    assert [(e.by, e.detail) for e in record.history if e.by] == [
        ("local", "customer withdrew the order")
    ]
    assert console.h.side_effects()["registrations_cancelled"] == before + 1
    assert "customer withdrew the order" in console.driver.find_element(By.ID, "history").text


def test_retry_from_the_page_runs_a_new_generation(console: Console) -> None:
    # given a flow that failed at create_entity (a permanent 400) and was undone
    flow_id = new_id("retry")
    activates_after(console, flow_id, 2.5)
    fault = {"method": "POST", "path_prefix": "/entities", "status": 400, "count": 1}
    console.h.client_api("POST", "/admin/faults", json=[fault])
    start(console, flow_id)
    assert console.h.wait_terminal(flow_id).status is Status.FAILED

    # when an operator retries it from its page
    console.open(f"/console/flows/{flow_id}")
    confirm_with_reason(console, "retry", "the client API fixed its validation")

    # then the new generation runs to success on the page, which marks where it began
    console.wait(status_shown(flow_id, Status.SUCCEEDED))
    record = console.h.wait_terminal(flow_id)
    assert record.position.generation == 1
    boundary = console.driver.find_element(By.CSS_SELECTOR, "#timeline g.boundary text").text
    assert boundary == "generation 1"
    console.screenshot("console-flow.png")


def test_reset_to_a_step_from_the_page_after_its_dry_run(console: Console) -> None:
    # given a flow that succeeded
    flow_id = new_id("reset")
    activates_after(console, flow_id, 0)
    start(console, flow_id)
    first = console.h.wait_terminal(flow_id)
    assert first.status is Status.SUCCEEDED

    # when an operator chooses create_entity on its reset page and asks for the dry run
    console.open(f"/console/flows/{flow_id}")
    console.driver.find_element(By.ID, "reset").click()
    Select(console.find("step")).select_by_value("create_entity")
    console.driver.find_element(By.ID, "dry-run").click()

    # then it lists what it would do, and confirming with a reason does exactly that
    assert console.find("undone").text == "create_entity"
    assert console.driver.find_element(By.ID, "rerun").text == "create_entity"
    assert console.driver.find_element(By.ID, "kept").text == "register"
    console.driver.find_element(By.ID, "reason").send_keys("the entity was misnamed")
    console.driver.find_element(By.ID, "confirm").click()
    assert poll_until(lambda: _generation(console, flow_id) == 1, timeout_s=30)
    record = console.h.wait_terminal(flow_id)
    assert record.status is Status.SUCCEEDED
    since = record.history[len(first.history) :]
    assert [e.step for e in since if e.outcome == "compensated"] == ["create_entity"]
    assert [(e.outcome, e.by) for e in since if e.by] == [("reset", "local")]


def _generation(console: Console, flow_id: str) -> int:
    record = console.h.store.get(flow_id)
    return -1 if record is None else record.position.generation


def test_a_replayed_dead_letter_starts_its_flow(console: Console) -> None:
    # given a start message held on the dead-letter topic (as Pub/Sub leaves one after five
    # failed deliveries)
    flow_id = new_id("replay")
    body = {"flow": "registration", "flow_id": flow_id, "input": {"resource": flow_id}}
    client = publisher_client(f"127.0.0.1:{console.h.ports.pubsub}")
    message = PubsubMessage(
        data=json.dumps(body).encode(), attributes={"CloudPubSubDeadLetterSourceDeliveryCount": "5"}
    )
    topic = client.topic_path("relayflow-local", "flow-requests-dead")
    dead = str(client.publish(topic=topic, messages=[message]).message_ids[0])

    # when an operator finds it among the dead letters and replays it as it was
    console.open("/console/dead-letters")
    row = console.driver.find_element(By.CSS_SELECTOR, f'tr[data-id="{dead}"]')
    row.find_element(By.LINK_TEXT, "Replay…").click()
    console.find("reason").send_keys("start function fixed")
    console.driver.find_element(By.ID, "replay-as-is").click()

    # then the console says it went out, its flow runs to its end, and it is held no more
    assert "Replayed as message" in console.find("notice").text
    assert console.h.wait_terminal(flow_id).status is Status.SUCCEEDED
    console.open("/console/dead-letters")
    assert not console.driver.find_elements(By.CSS_SELECTOR, f'tr[data-id="{dead}"]')


def test_the_services_metrics_count_the_flows_a_batch_ended(console: Console) -> None:
    # given the services' metrics before a batch, taken when no earlier test's flow can still
    # end and be counted with it (one an earlier test left running, had it failed, cancelled)
    quiesce(console)
    before = ended_metrics(console)

    # when a batch runs: three flows that succeed and one the client API refuses
    batch = [new_id("metrics") for _ in range(4)]
    for i, flow_id in enumerate(batch):
        start(console, flow_id, resource=f"reject-{flow_id}" if i == 3 else None)
    records = [console.h.wait_terminal(flow_id) for flow_id in batch]

    # then the services' /metrics (worker, poller, api) counted each end once, by status and
    # code, and the polls of each ended flow
    after = ended_metrics(console)
    grew = {
        key: after[key] - before.get(key, 0) for key in after if after[key] != before.get(key, 0)
    }
    failed = records[3].result
    assert failed is not None
    assert grew == {
        ("relayflow.flows.ended", "SUCCEEDED", "OK"): 3,
        ("relayflow.flows.ended", "FAILED", failed.code): 1,
        ("relayflow.flow.polls", "SUCCEEDED", "count"): 3,
        ("relayflow.flow.polls", "SUCCEEDED", "sum"): sum(r.polls for r in records[:3]),
        ("relayflow.flow.polls", "FAILED", "count"): 1,
    } | ({("relayflow.flow.polls", "FAILED", "sum"): records[3].polls} if records[3].polls else {})


def quiesce(console: Console) -> None:
    """Cancel the stack's active flows, and wait until none is active."""

    def active() -> list[str]:
        found: list[str] = []
        for status in ACTIVE:
            page = requests.get(console.url(f"/flows?status={status}&limit=500"), timeout=10)
            page.raise_for_status()
            found += [flow["flow_id"] for flow in page.json()["flows"]]
        return found

    for flow_id in active():
        requests.post(console.url(f"/flows/{flow_id}:cancel"), json={"reason": "t"}, timeout=10)
    assert poll_until(lambda: not active(), timeout_s=60), f"still active: {active()}"


def ended_metrics(console: Console) -> dict[tuple[str, str, str], float]:
    """flows.ended by (status, code) and flow.polls by status (count, sum), summed over the
    services that can end a flow."""
    found: dict[tuple[str, str, str], float] = {}
    ports = console.h.ports
    for port in (ports.worker, ports.poller, ports.api):
        body = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).json()
        assert body["enabled"] is True, body
        metrics = body["metrics"]
        for point in metrics.get("relayflow.flows.ended", {}).get("points", []):
            key = ("relayflow.flows.ended", point["labels"]["status"], point["labels"]["code"])
            found[key] = found.get(key, 0) + point["value"]
        for point in metrics.get("relayflow.flow.polls", {}).get("points", []):
            for part in ("count", "sum"):
                key = ("relayflow.flow.polls", point["labels"]["status"], part)
                found[key] = found.get(key, 0) + point[part]
    return found


def test_a_flows_offloaded_input_is_read_back_on_its_page(console: Console) -> None:
    # given a fleet flow whose input (200 resources, about 20 KiB) went to the bucket, each of
    # its items refused at once by the client API
    flow_id = new_id("offload")
    resources = [f"reject-{flow_id}-{i:03d}-{'x' * 70}" for i in range(200)]
    body = {"flow": "fleet", "flow_id": flow_id, "input": {"resources": resources}}
    console.h.publish(body)
    console.h.wait_terminal(flow_id, timeout_s=120)

    # when an operator opens its page, the input shows as its claim check
    console.open(f"/console/flows/{flow_id}")
    assert "$relayflow" in console.find("input").text
    assert resources[0] not in console.find("input").text

    # then asking for it reads it back, on the page
    console.find("read-back").click()
    console.arrived("resolve=true")
    shown = console.read(lambda d: d.find_element(By.ID, "input").text)
    assert resources[0] in shown and resources[-1] in shown
    assert console.find("claim-checks").is_displayed()

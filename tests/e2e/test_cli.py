"""The relayflow command against a running stack: publish, status, watch, list with the
console's filters, cancel and retry with a reason, rejected messages, dead letters, and bad
input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import requests
from google.pubsub_v1 import PubsubMessage

from relayflow.core.state import Status
from relayflow.local.polling import poll_until
from tests.e2e.conftest import Harness

pytestmark = pytest.mark.e2e
RELAYFLOW = str(Path(sys.executable).parent / "relayflow")


def _run(harness: Harness | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.endswith("_EMULATOR_HOST") and not k.startswith("RELAYFLOW_API_")
    }
    if harness is not None:
        env |= harness.stack.env()
    return subprocess.run(
        [RELAYFLOW, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_publish_status_watch_and_list(harness: Harness, new_id: Callable[[str], str]) -> None:
    # given a flow published with the CLI
    flow_id = new_id("cli")
    published = _run(
        harness, "publish", "registration", "--input", json.dumps({"resource": flow_id}),
        "--flow-id", flow_id,
    )  # fmt: skip
    assert published.returncode == 0, published.stderr
    assert f"flow id {flow_id}" in published.stdout

    # when it has ended, watch replays each step and poll with its delay, and exits 0
    watched = _run(harness, "watch", flow_id, "--timeout-s", "60")
    assert watched.returncode == 0, watched.stderr
    assert "await_registration   poll 0" in watched.stdout
    assert "next in" in watched.stdout
    assert "status    SUCCEEDED" in watched.stdout

    # then status and list show it
    status = _run(harness, "status", flow_id, "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["status"] == Status.SUCCEEDED.value
    listed = _run(harness, "list", "--status", "succeeded", "--limit", "500")
    assert flow_id in listed.stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("publish", "registration", "--input", "[1]"), "must be a JSON object, got list"),
        (("publish", "registration", "--input", "{oops"), "not JSON"),
        (("publish", "registration", "--flow-id", "a/b"), "does not match"),
        (("list", "--status", "sleeping"), "is not one of"),
        (("list", "--limit", "0"), "is not an integer in 1..500"),
    ],
)
def test_bad_arguments_exit_2_saying_what_is_wrong(
    harness: Harness, args: tuple[str, ...], says: str
) -> None:
    result = _run(harness, *args)
    assert result.returncode == 2
    assert says in result.stderr


def test_an_unknown_flow_id_exits_1(harness: Harness) -> None:
    result = _run(harness, "status", "no-such-flow")
    assert result.returncode == 1
    assert "no flow with id 'no-such-flow'" in result.stderr


def test_without_the_local_env_the_cli_says_how_to_get_it() -> None:
    result = _run(None, "status", "anything")
    assert result.returncode == 2
    assert "source .relayflow/local/env" in result.stderr


def _start(harness: Harness, flow_id: str, resource: str | None = None) -> None:
    body = {"flow": "registration", "flow_id": flow_id, "input": {"resource": resource or flow_id}}
    harness.publish(body)


def test_list_pages_by_cursor_with_the_consoles_filters_and_counts(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    # given three flows that failed (the client API refuses reject-* resources)
    failed = [new_id("cli-page") for _ in range(3)]
    for flow_id in failed:
        _start(harness, flow_id, resource=f"reject-{flow_id}")
    for flow_id in failed:
        harness.wait_terminal(flow_id)

    # when they are listed two at a time, newest first
    first = _run(harness, "list", "--status", "failed", "--flow", "registration", "--limit", "2",
                 "--counts")  # fmt: skip
    assert first.returncode == 0, first.stderr
    (more,) = [line for line in first.stdout.splitlines() if line.startswith("more: ")]
    second = _run(harness, "list", "--status", "failed", "--flow", "registration", "--limit",
                  "500", "--cursor", more.split()[-1])  # fmt: skip

    # then the pages hold every one of them once, and the counts head the first
    listed = first.stdout + second.stdout
    assert all(listed.count(flow_id) == 1 for flow_id in failed)
    assert first.stdout.splitlines()[0].startswith("PENDING ")
    assert "FAILED " in first.stdout.splitlines()[0]


def test_cancel_with_a_reason_waits_showing_the_compensation_then_retry(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    # given a flow polling a registration that does not activate
    flow_id = new_id("cli-cancel")
    harness.client_api("POST", "/admin/config", json={"resource_delays": {flow_id: None}})
    _start(harness, flow_id)
    assert poll_until(lambda: harness.polls_shown(flow_id) >= 1, timeout_s=20)

    # when it is cancelled from the CLI, waiting for the end
    cancelled = _run(harness, "cancel", flow_id, "--reason", "customer withdrew", "--wait")

    # then the CLI showed the compensation as it happened and the audit names who and why
    assert cancelled.returncode == 0, cancelled.stderr
    assert "compensated" in cancelled.stdout
    assert cancelled.stdout.strip().endswith(f"{flow_id} is CANCELLED")
    record = harness.store.get(flow_id)
    assert record is not None and record.status is Status.CANCELLED
    assert [(e.by, e.detail) for e in record.history if e.by] == [("local", "customer withdrew")]

    # and a retry starts generation 1, recorded too
    retried = _run(harness, "retry", flow_id, "--reason", "customer came back")
    assert retried.returncode == 0, retried.stderr
    assert "generation 1 started" in retried.stdout
    status = _run(harness, "status", flow_id)
    assert "by local" in status.stdout and "customer came back" in status.stdout


def test_cancelling_an_ended_flow_says_why_not(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    flow_id = new_id("cli-ended")
    _start(harness, flow_id)
    harness.wait_terminal(flow_id)
    result = _run(harness, "cancel", flow_id, "--reason", "too late")
    assert result.returncode == 1
    assert "409 FAILED_PRECONDITION: illegal transition SUCCEEDED -> CANCELLED" in result.stderr


def test_rejected_list_shows_a_malformed_message_with_its_reason(harness: Harness) -> None:
    message_id = harness.publish(b'{"flow": "registration"}')

    def listed() -> bool:
        return message_id in _run(harness, "rejected", "list", "--limit", "500").stdout

    assert poll_until(listed, timeout_s=30, interval_s=0.5)
    shown = _run(harness, "rejected", "list", "--limit", "500").stdout
    (line,) = [line for line in shown.splitlines() if message_id in line]
    assert "input: Field required" in line


def test_a_dead_letter_is_listed_then_replayed_edited_and_starts_its_flow(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    # given a start message held on the dead-letter topic (as Pub/Sub leaves it after five
    # failed deliveries), whose input lacks the resource
    flow_id = new_id("cli-dead")
    dead = _dead_letter(harness, {"flow": "registration", "flow_id": flow_id, "input": {}})
    listed = _run(harness, "dead-letters", "list")
    assert listed.returncode == 0, listed.stderr
    assert dead in listed.stdout
    assert "reading the dead-letter hold" in listed.stderr  # progress while it pulls

    # when it is replayed with the input fixed
    fixed = {"flow": "registration", "flow_id": flow_id, "input": {"resource": flow_id}}
    replayed = _run(harness, "dead-letters", "replay", dead, "--reason", "resource added",
                    "--edit-json", json.dumps(fixed))  # fmt: skip

    # then its flow starts and ends, and the letter is no longer held
    assert replayed.returncode == 0, replayed.stderr
    assert f"replayed {dead} as message " in replayed.stdout
    assert harness.wait_terminal(flow_id).status is Status.SUCCEEDED
    assert dead not in _run(harness, "dead-letters", "list").stdout


def _dead_letter(harness: Harness, body: dict[str, object]) -> str:
    from relayflow.local.clients import publisher_client

    client = publisher_client(f"127.0.0.1:{harness.ports.pubsub}")
    topic = client.topic_path("relayflow-local", "flow-requests-dead")
    message = PubsubMessage(
        data=json.dumps(body).encode(),
        attributes={"CloudPubSubDeadLetterSourceDeliveryCount": "5"},
    )
    return str(client.publish(topic=topic, messages=[message]).message_ids[0])


def test_watch_shows_a_chains_polls_in_flight_marked_not_yet_written(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    # given a flow polling a registration that does not activate (chains of 3 in this stack)
    flow_id = new_id("cli-chain")
    harness.client_api("POST", "/admin/config", json={"resource_delays": {flow_id: None}})
    _start(harness, flow_id)

    # when it is watched until its second chain has begun
    watched = _run(harness, "watch", flow_id, "--timeout-s", "8")

    # then the polls its chains carried were shown before their checkpoint wrote them, each
    # once, and the checkpoint's entries were not shown again
    assert watched.returncode == 1, watched.stderr  # still running at the timeout
    lines = [line for line in watched.stdout.splitlines() if "await_registration" in line]
    assert any("not yet written" in line for line in lines), watched.stdout
    polls = [line.split("poll ")[1].split()[0] for line in lines]
    assert len(polls) == len(set(polls)), watched.stdout
    assert {"0", "1", "2", "3"} <= set(polls), watched.stdout
    cancelled = _run(harness, "cancel", flow_id, "--reason", "tidy")
    assert cancelled.returncode == 0, cancelled.stderr


def test_a_flow_is_found_by_its_labels_code_and_dependency_in_the_cli_api_and_console(
    harness: Harness, new_id: Callable[[str], str]
) -> None:
    # given a flow published with labels, which the client API rejects (it fails polling)
    flow_id, order = new_id("cli-labels"), new_id("ORD")
    rejected = json.dumps({"resource": f"reject-{flow_id}"})
    published = _run(
        harness, "publish", "registration", "--input", rejected, "--flow-id", flow_id,
        "--label", f"order_id={order}", "--label", "region=eu",
    )  # fmt: skip
    assert published.returncode == 0, published.stderr
    record = harness.wait_terminal(flow_id)
    assert record.labels == {"order_id": order, "region": "eu"}
    code = record.result.code if record.result else ""
    assert (record.status, code, record.dependency) == (
        Status.FAILED,
        "REJECTED",
        "client-api",  # what await_registration calls
    )

    # then the CLI finds it by label (several: all of them), code and dependency, and shows them
    found = _run(harness, "list", "--label", f"order_id={order}", "--label", "region=eu",
                 "--code", "REJECTED", "--dependency", "client-api")  # fmt: skip
    assert found.returncode == 0, found.stderr
    (row,) = [line for line in found.stdout.splitlines() if flow_id in line]
    assert f"order_id={order} region=eu" in row and "REJECTED" in row
    status = _run(harness, "status", flow_id)
    assert f"labels    order_id={order} region=eu" in status.stdout
    assert "dependency client-api" in status.stdout

    # and so does the api, counts included (one label), and a bad label is a 400
    api = harness.url(harness.ports.api, "/flows")
    listed = requests.get(api, params={"label": [f"order_id={order}", "region=eu"]}, timeout=10)
    assert [f["flow_id"] for f in listed.json()["flows"]] == [flow_id]
    other = requests.get(api, params={"label": [f"order_id={order}", "region=us"]}, timeout=10)
    assert other.json()["flows"] == []
    assert listed.json()["flows"][0]["labels"] == {"order_id": order, "region": "eu"}
    counted = requests.get(f"{api}:counts", params={"label": f"order_id={order}"}, timeout=10)
    assert counted.json()["counts"]["FAILED"] == 1 and counted.json()["total"] == 1
    refused = requests.get(api, params={"label": "Order=1"}, timeout=10)
    assert refused.status_code == 400 and "label key 'Order' must match" in refused.text

    # and the console: its label filter, the labels on the list and on the flow's page
    page = requests.get(
        harness.url(harness.ports.api, "/console/flows"),
        params={"label": f"order_id={order} region=eu", "dependency": "client-api"},
        timeout=10,
    )
    assert page.status_code == 200 and page.text.count(f'data-flow-id="{flow_id}"') == 1
    assert f'value="order_id={order} region=eu"' in page.text
    assert 'id="counts-none"' in page.text  # two labels: no counts per status
    shown = requests.get(harness.url(harness.ports.api, f"/console/flows/{flow_id}"), timeout=10)
    assert f"order_id={order}</a>" in shown.text and 'id="dependency"' in shown.text

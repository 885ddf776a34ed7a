"""Payload offload on the local stack (bench/offload_app.py on the e2e tests' ``bench_stack``,
the gcp-storage-emulator as its bucket): a step's 20 MiB output goes to the bucket, the flow's
document stays small, the next step, the api and the client read the value unchanged; an object
deleted or changed while the flow waits ends it PAYLOAD_MISSING or PAYLOAD_CORRUPT; a ForEach
whose items' outputs overflow their lanes pages them and joins them unchanged; a flow's
sensitive fields are sealed in the bucket's objects (the emulator's bytes read back) as in its
document. No test sleeps: each polls until the flow has ended or waits."""

from __future__ import annotations

import hashlib
import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from google.cloud import firestore

from relayflow import Client
from relayflow.core.payloads import ref_of
from relayflow.core.records import FlowRecord
from relayflow.core.sharding import prefix_of
from relayflow.core.state import TERMINAL, Status
from relayflow.gcp import blobs
from relayflow.gcp.events import Events, build_publisher
from relayflow.gcp.store import FlowStore
from relayflow.local.environment import OFFLOAD_BUCKET
from relayflow.local.polling import poll_until
from relayflow.local.stack import Stack

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from offload_app import blob, digest, token_of

PROJECT = "relayflow-local"


@pytest.fixture
def env(bench_stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    for name, value in bench_stack.env().items():
        monkeypatch.setenv(name, value)
    yield bench_stack.env()


@pytest.fixture
def store(env: dict[str, str]) -> FlowStore:
    return FlowStore(firestore.Client(project=PROJECT))


def start(flow: str, input: dict[str, Any]) -> str:
    flow_id = f"{flow}-{uuid.uuid4().hex[:10]}"
    body = {"flow": flow, "flow_id": flow_id, "input": input}
    Events(build_publisher(), project=PROJECT).publish("flow-requests", body)
    return flow_id


def ended(store: FlowStore, flow_id: str, timeout_s: float = 120.0) -> FlowRecord:
    def done() -> bool:
        record = store.get(flow_id)
        return record is not None and record.status in TERMINAL

    assert poll_until(done, timeout_s=timeout_s, interval_s=0.2), f"{flow_id} never ended"
    record = store.get(flow_id)
    assert record is not None
    return record


def stored_bytes(store: FlowStore, flow_id: str) -> int:
    """The flow's document as Firestore holds it, in bytes of JSON."""
    found = store.read(flow_id)
    assert found is not None and found.stored is not None
    return len(json.dumps(found.stored, default=str).encode())


def test_a_step_returning_20_mib_succeeds_and_every_consumer_reads_it_unchanged(
    env: dict[str, str], store: FlowStore, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = blob(20, "big-1")
    flow_id = start("payload", {"mib": 20, "seed": "big-1"})

    record = ended(store, flow_id)

    assert record.status is Status.SUCCEEDED, record.result
    assert record.outputs["check"] == {"sha256": digest(expected), "length": 20 * 1024 * 1024}
    ref = ref_of(record.outputs["make"])
    assert ref is not None and ref.bucket == OFFLOAD_BUCKET and ref.size > 20 * 1024 * 1024
    assert ref_of(record.result.data if record.result else None) == ref  # the same object
    size = stored_bytes(store, flow_id)
    with capsys.disabled():
        print(f"\n  20 MiB flow: document {size:,} bytes, object {ref.size:,} bytes")
    assert size < 64 * 1024
    result = Client(environ=env, wait="api").get(flow_id).result(timeout=60)
    assert result["data"] == expected and result["sha256"] == digest(expected)
    shown = requests.get(api(env, flow_id), params={"resolve": "true"}, timeout=60)
    assert shown.status_code == 413, shown.text  # three references to 20 MiB: too much to show
    assert shown.json()["error"]["status"] == "PAYLOAD_TOO_LARGE"


def api(env: dict[str, str], flow_id: str, path: str = "") -> str:
    return f"{env['RELAYFLOW_API_URL']}/flows/{flow_id}{path}"


def waiting(store: FlowStore, flow_id: str) -> FlowRecord:
    def at_wait() -> bool:
        record = store.get(flow_id)
        return record is not None and "make" in record.outputs

    assert poll_until(at_wait, timeout_s=60, interval_s=0.2), f"{flow_id} never waited"
    record = store.get(flow_id)
    assert record is not None
    return record


@pytest.mark.parametrize(
    ("change", "code"),
    [("delete", "PAYLOAD_MISSING"), ("tamper", "PAYLOAD_CORRUPT")],
)
def test_an_object_gone_or_changed_ends_the_flow_with_its_code(
    env: dict[str, str], store: FlowStore, change: str, code: str
) -> None:
    flow_id = start("payload-wait", {"mib": 1, "seed": f"wait-{change}"})
    ref = ref_of(waiting(store, flow_id).outputs["make"])
    assert ref is not None
    client = blobs.build_client(PROJECT)
    if change == "delete":
        blobs.GcsBlobs(OFFLOAD_BUCKET, project=PROJECT, client=client).delete(ref.name)
    else:
        same_size = blob(1, "another value").encode()[: ref.size].ljust(ref.size, b" ")
        client.bucket(OFFLOAD_BUCKET).blob(ref.name).upload_from_string(same_size)
        assert hashlib.sha256(same_size).hexdigest() != ref.sha256

    go = requests.post(api(env, flow_id, "/signals/go"), json={"data": {}}, timeout=10)
    assert go.ok, go.text
    record = ended(store, flow_id)

    assert record.status is Status.FAILED
    assert record.result is not None and record.result.error is not None
    assert record.result.error["code"] == code
    assert "check" not in record.outputs


def test_a_foreach_of_100_items_pages_its_lanes_and_joins_every_output(
    env: dict[str, str], store: FlowStore
) -> None:
    flow_id = start("payload-fanout", {"items": 100, "item_bytes": 15_000})

    record = ended(store, flow_id)

    assert record.status is Status.SUCCEEDED, record.result
    assert record.outputs["summarize"] == {"items": 100, "bytes": 100 * 15_000}
    assert ref_of(record.outputs["each"]) is not None  # 1.5 MB joined: offloaded
    lanes = [store.get(lane) for lane in record.lanes]
    assert any(lane is not None and lane.item_pages for lane in lanes)
    assert stored_bytes(store, flow_id) < 64 * 1024
    shown = requests.get(api(env, flow_id), params={"resolve": "true"}, timeout=60)
    assert shown.ok, shown.text
    assert shown.json()["outputs"]["each"]["items"][99]["i"] == 99


def test_a_flows_sensitive_fields_are_sealed_in_the_buckets_objects(
    env: dict[str, str], store: FlowStore
) -> None:
    card, notes = "4111111111111111", "n" * 40_000
    flow_id = start("payload-sealed", {"card": card, "notes": notes, "mib": 0.1})

    record = ended(store, flow_id)

    assert record.status is Status.SUCCEEDED, record.result  # verify read both in clear
    offloaded = (record.input, record.outputs["tokenize"], record.outputs["verify"])
    assert all(ref_of(value) is not None for value in offloaded)
    bucket = blobs.build_client(PROJECT).bucket(OFFLOAD_BUCKET)
    listed = bucket.list_blobs(prefix=f"{prefix_of(flow_id)}/{flow_id}/")
    objects = {b.name: b.download_as_bytes() for b in listed}
    # the input, tokenize's output and the result (verify's output)
    assert len(objects) == 3 and all(b'"$sealed"' in data for data in objects.values())
    found = store.read(flow_id)
    assert found is not None
    document = json.dumps(found.stored, default=str).encode()
    for name, raw in [*objects.items(), ("firestore", document)]:
        assert card.encode() not in raw and token_of(card).encode() not in raw, name
    shown = requests.get(api(env, flow_id), params={"resolve": "true"}, timeout=60).json()
    assert shown["input"] == {"card": "[redacted]", "notes": notes, "mib": 0.1}
    assert shown["outputs"]["tokenize"]["token"] == "[redacted]"
    assert shown["result"]["data"]["token"] == "[redacted]"
    # A client holding the stack's keyset reads the offloaded result back and opens its token.
    result = Client(environ=env, wait="api").get(flow_id).result(timeout=60)
    assert result["token"] == token_of(card) and result["data"] == blob(0.1, flow_id)
    assert result["card_last4"] == "1111"

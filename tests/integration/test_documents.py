"""relayflow.gcp.documents against the Firestore emulator: plain-protobuf reads and writes
that the high-level client reads back the same, and updates that send only what changed."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from google.api_core.exceptions import AlreadyExists, FailedPrecondition
from google.cloud import firestore

from relayflow.core.position import TaskKind
from relayflow.core.records import HistoryEntry
from relayflow.core.state import Status
from relayflow.gcp.documents import Documents
from relayflow.gcp.store import FlowStore
from relayflow.telemetry import Counters

from .support import make_record

T0 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
EVERY_KIND = {
    "none": None,
    "yes": True,
    "int": -(2**62),
    "float": 2.5,
    "text": "naïve ✓",
    "status": Status.RUNNING,
    "bytes": b"\x00\xff",
    "when": T0,
    "empty_map": {},
    "empty_list": [],
    "nested": {"a": [1, {"b": [None, False, "c"]}], "d": {"e": 1.0}},
}


@pytest.fixture
def docs(firestore_client: firestore.Client) -> Documents:
    return Documents(firestore_client)


def test_a_created_document_reads_back_the_same_through_both_clients(
    docs: Documents, firestore_client: firestore.Client
) -> None:
    path = docs.path("kinds", "every")
    written = docs.create(path, EVERY_KIND, timeout=10)

    fields, version = docs.get(path, timeout=10) or ({}, None)
    expected = {**EVERY_KIND, "status": "RUNNING"}
    assert fields == expected
    assert version == written.version
    assert firestore_client.collection("kinds").document("every").get().to_dict() == expected


def test_create_refuses_an_existing_document(docs: Documents) -> None:
    path = docs.path("kinds", "twice")
    docs.create(path, {"n": 1}, timeout=10)
    with pytest.raises(AlreadyExists):
        docs.create(path, {"n": 2}, timeout=10)


def test_an_update_replaces_only_the_fields_it_names(docs: Documents) -> None:
    path = docs.path("kinds", "partial")
    first = docs.create(path, {"kept": {"x": 1}, "changed": [1, 2]}, timeout=10)

    docs.update(path, {"changed": [3]}, unchanged_since=first.version, timeout=10)

    fields, _ = docs.get(path, timeout=10) or ({}, None)
    assert fields == {"kept": {"x": 1}, "changed": [3]}


def test_an_update_from_an_old_version_is_refused(docs: Documents) -> None:
    path = docs.path("kinds", "raced")
    first = docs.create(path, {"n": 1}, timeout=10)
    docs.update(path, {"n": 2}, unchanged_since=first.version, timeout=10)

    with pytest.raises(FailedPrecondition):
        docs.update(path, {"n": 3}, unchanged_since=first.version, timeout=10)
    fields, _ = docs.get(path, timeout=10) or ({}, None)
    assert fields == {"n": 2}


def test_a_change_writes_the_fields_that_changed_and_fewer_bytes(
    firestore_client: firestore.Client,
) -> None:
    counters = Counters()
    flow_store = FlowStore(firestore_client, counters=counters)
    record = make_record("flow-lean", input={"payload": "x" * 4000}, status=Status.RUNNING)
    flow_store.create(record)

    written = flow_store.change_versioned(
        "flow-lean", lambda r: r.model_copy(update={"polls": r.polls + 1})
    )

    assert written is not None
    assert flow_store.get("flow-lean") == written.record
    assert written.record.polls == 1
    sent = counters.snapshot()["firestore_bytes_written"]
    assert 0 < sent < 4000  # the 4 kB input is not rewritten


def test_a_change_to_an_equal_but_differently_typed_value_is_written(
    flow_store: FlowStore,
) -> None:
    flow_store.create(make_record("flow-typed", outputs={"step": {"flag": 1}}))

    flagged = {"step": {"flag": True}}
    flow_store.change("flow-typed", lambda r: r.model_copy(update={"outputs": flagged}))

    stored = flow_store.get("flow-typed")
    assert stored is not None
    assert stored.outputs == {"step": {"flag": True}}
    assert type(stored.outputs["step"]["flag"]) is bool


def entry(n: int) -> HistoryEntry:
    return HistoryEntry(
        at=T0,
        step="await_active",
        kind=TaskKind.POLL,
        poll=n,
        outcome="not ready",
        detail="x" * 100,
    )


def test_a_history_entry_is_appended_not_the_history_rewritten(
    firestore_client: firestore.Client,
) -> None:
    counters = Counters()
    flow_store = FlowStore(firestore_client, counters=counters)
    flow_store.create(make_record("flow-log", history=[entry(n) for n in range(50)]))

    written = flow_store.change_versioned(
        "flow-log", lambda r: r.model_copy(update={"history": [*r.history, entry(50)]})
    )

    stored = flow_store.get("flow-log")
    assert written is not None and stored is not None
    assert [e.poll for e in stored.history] == list(range(51))
    assert stored == written.record
    assert counters.snapshot()["firestore_bytes_written"] < 1000  # 51 entries are ~8 kB


def test_a_trimmed_history_is_written_whole(flow_store: FlowStore) -> None:
    flow_store.create(make_record("flow-trim", history=[entry(n) for n in range(20)]))

    flow_store.change(
        "flow-trim", lambda r: r.model_copy(update={"history": [*r.history[5:], entry(20)]})
    )

    stored = flow_store.get("flow-trim")
    assert stored is not None
    assert [e.poll for e in stored.history] == list(range(5, 21))

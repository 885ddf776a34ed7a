"""relayflow.gcp.store.flow_documents against the Firestore emulator: create-if-absent, reads,
compare-and-set changes, the published mark."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

from relayflow.core.records import FlowRecord
from relayflow.core.state import Status
from relayflow.gcp.store import FlowStore

from .support import make_record

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_create_is_create_if_absent(flow_store: FlowStore) -> None:
    first = make_record("flow-a", input={"version": 1})
    second = make_record("flow-a", input={"version": 2}, status=Status.RUNNING)

    assert flow_store.create(first) is True
    assert flow_store.create(second) is False

    assert flow_store.get("flow-a") == first


def test_two_tenants_flows_with_one_id_are_two_documents_found_by_id(
    flow_store: FlowStore,
) -> None:
    acme = make_record("order-42").model_copy(update={"tenant": "acme"})
    globex = make_record("order-42", input={"other": True}).model_copy(update={"tenant": "globex"})

    assert flow_store.create(acme) is True
    assert flow_store.create(globex) is True  # not taken by acme's

    assert flow_store.get("acme~order-42") == acme
    assert flow_store.get("globex~order-42") == globex
    assert flow_store.get("order-42") is None  # no default tenant's flow has that id
    assert sorted(r.tenant for r in flow_store.find("order-42")) == ["acme", "globex"]


def test_get_of_a_missing_flow_is_none(flow_store: FlowStore) -> None:
    assert flow_store.get("no-such-flow") is None


def test_the_document_round_trips_every_field(flow_store: FlowStore) -> None:
    record = make_record(
        "flow-full",
        status=Status.RUNNING,
        next_run_at=T0,
        outputs={"first": {"id": "r-1", "nested": [1, 2.5, None]}},
        deadline_at=T0 + timedelta(minutes=15),
    )

    flow_store.create(record)

    assert flow_store.get("flow-full") == record


def test_concurrent_changes_lose_no_update(flow_store: FlowStore) -> None:
    flow_store.create(make_record("flow-counter"))
    workers = 16
    start = threading.Barrier(workers)

    def bump(_: int) -> FlowRecord | None:
        start.wait(timeout=30)
        return flow_store.change(
            "flow-counter", lambda r: r.model_copy(update={"attempts": r.attempts + 1})
        )

    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(bump, range(workers)))

    assert all(result is not None for result in results)
    assert sorted(r.attempts for r in results if r is not None) == list(range(1, workers + 1))
    stored = flow_store.get("flow-counter")
    assert stored is not None
    assert stored.attempts == workers


def test_a_change_returning_none_writes_nothing(flow_store: FlowStore) -> None:
    record = make_record("flow-stale")
    flow_store.create(record)
    seen: list[FlowRecord] = []

    def stale(current: FlowRecord) -> FlowRecord | None:
        seen.append(current)
        return None

    assert flow_store.change("flow-stale", stale) is None

    assert seen == [record]
    assert flow_store.get("flow-stale") == record


def test_a_change_of_a_missing_flow_is_none_and_creates_nothing(flow_store: FlowStore) -> None:
    called: list[FlowRecord] = []

    def change(current: FlowRecord) -> FlowRecord:
        called.append(current)
        return current

    assert flow_store.change("no-such-flow", change) is None

    assert called == []
    assert flow_store.get("no-such-flow") is None


def test_a_change_returns_and_stores_the_new_record(flow_store: FlowStore) -> None:
    flow_store.create(make_record("flow-run"))

    changed = flow_store.change(
        "flow-run", lambda r: r.model_copy(update={"status": Status.RUNNING, "polls": 3})
    )

    assert changed is not None
    assert (changed.status, changed.polls) == (Status.RUNNING, 3)
    assert flow_store.get("flow-run") == changed


def test_mark_published_sets_only_the_flag(flow_store: FlowStore) -> None:
    record = make_record("flow-done", status=Status.SUCCEEDED)
    flow_store.create(record)

    assert flow_store.mark_published("flow-done", generation=0) is True

    assert flow_store.get("flow-done") == record.model_copy(update={"result_published": True})
    assert flow_store.mark_published("flow-done", generation=0) is False  # once only


def test_mark_published_leaves_a_newer_generation_alone(flow_store: FlowStore) -> None:
    # given a flow that an operator restarted after its generation 0 ended
    record = make_record("flow-again", status=Status.PENDING)
    gen1 = record.model_copy(
        update={"position": record.position.model_copy(update={"generation": 1})}
    )
    flow_store.create(gen1)

    # when generation 0's late mark arrives, then generation 1 keeps its flag unset
    assert flow_store.mark_published("flow-again", generation=0) is False
    stored = flow_store.get("flow-again")
    assert stored is not None and stored.result_published is False

"""relayflow.gcp.store.listing against the Firestore emulator: the same contract MemoryStore
keeps (filters, newest first, cursor paging with start_after, projections, count
aggregations), and ``recent``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from google.cloud import firestore

from relayflow.core.state import Status
from relayflow.gcp.store import FlowStore
from relayflow.topology import Topology
from tests.unit.test_listing import ListingContract

from .support import make_record

pytestmark = pytest.mark.emulators

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


# The contract holds for any count of index shards; 8 merge pages as the topology's 128 do, at
# a sixteenth of the queries (tests/integration/test_store_shards.py covers the shards' count).
CONTRACT_SHARDS = 8


class TestFirestoreListing(ListingContract):
    @pytest.fixture
    def store(self, firestore_client: firestore.Client, topology: Topology) -> FlowStore:
        return FlowStore(
            firestore_client,
            flows=topology.firestore.flows_collection,
            rejected=topology.firestore.rejected_collection,
            shards=CONTRACT_SHARDS,
        )


def test_recent_filters_by_status_newest_update_first(flow_store: FlowStore) -> None:
    for flow_id, status, minutes in [
        ("run-old", Status.RUNNING, 1),
        ("done", Status.SUCCEEDED, 5),
        ("run-new", Status.RUNNING, 9),
        ("pending", Status.PENDING, 7),
        ("run-mid", Status.RUNNING, 4),
    ]:
        updated_at = T0 + timedelta(minutes=minutes)
        flow_store.create(make_record(flow_id, status=status, updated_at=updated_at))

    running = flow_store.recent(status=Status.RUNNING)
    everything = flow_store.recent()
    top_two = flow_store.recent(limit=2)

    assert [r.flow_id for r in running] == ["run-new", "run-mid", "run-old"]
    assert [r.flow_id for r in everything] == ["run-new", "pending", "done", "run-mid", "run-old"]
    assert [r.flow_id for r in top_two] == ["run-new", "pending"]
    assert flow_store.recent(status=Status.FAILED) == []


def test_recent_filters_by_flow_and_version(flow_store: FlowStore) -> None:
    for flow_id, flow, version, minutes in [
        ("o1-a", "orders", 1, 1),
        ("o2-a", "orders", 2, 2),
        ("o1-b", "orders", 1, 3),
        ("reg", "registration", 1, 4),
    ]:
        updated_at = T0 + timedelta(minutes=minutes)
        record = make_record(flow_id, flow=flow, version=version, updated_at=updated_at)
        flow_store.create(record)

    assert [r.flow_id for r in flow_store.recent(flow="orders", version=1)] == ["o1-b", "o1-a"]
    assert [r.flow_id for r in flow_store.recent(flow="orders")] == ["o1-b", "o2-a", "o1-a"]
    assert [r.flow_id for r in flow_store.recent(version=2)] == ["o2-a"]

"""Listing against the Firestore emulator: the same contract MemoryStore keeps (filters,
newest first, cursor paging with start_after, projections, count aggregations)."""

from __future__ import annotations

import pytest

from relayflow.gcp.store import FlowStore
from tests.unit.test_listing import ListingContract

pytestmark = pytest.mark.emulators


class TestFirestoreListing(ListingContract):
    @pytest.fixture
    def store(self, flow_store: FlowStore) -> FlowStore:
        return flow_store

"""relayflow.gcp.store.rejections against the Firestore emulator: refused messages by id."""

from __future__ import annotations

from datetime import UTC, datetime

from relayflow.gcp.store import FlowStore

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_reject_and_rejected_round_trip(flow_store: FlowStore) -> None:
    body = {
        "message_id": "m-1",
        "reason": "message data is not JSON",
        "data_base64": "bm9wZQ==",
        "attributes": {"origin": "test"},
        "rejected_at": T0,
    }

    flow_store.reject("m-1", body)
    flow_store.reject("m-1", body)  # a redelivery overwrites the same record

    assert flow_store.rejected("m-1") == body
    assert flow_store.rejected("m-2") is None
    assert flow_store.get("m-1") is None  # rejections live apart from flows

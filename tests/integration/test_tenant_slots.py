"""relayflow.gcp.store.tenant_slots against the Firestore emulator: running slots taken by
conditional writes, never more than the quota, resting after they are taken, handed from an
ended flow straight to the next; waiting flows listed and counted oldest first."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

from relayflow.gcp.store import FlowStore
from tests.integration.support import make_record

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_rivals_never_take_more_slots_than_the_quota(flow_store: FlowStore) -> None:
    def take(i: int) -> str | None:
        grant = flow_store.acquire_slot("acme", slots=3, holder=f"f{i}", now=NOW, cooldown_s=0.0)
        return grant.slot

    with ThreadPoolExecutor(max_workers=8) as pool:
        taken = [s for s in pool.map(take, range(8)) if s is not None]
    assert len(taken) == 3 and len(set(taken)) == 3
    assert (
        flow_store.acquire_slot("acme", slots=3, holder="late", now=NOW, cooldown_s=0).slot is None
    )


def test_a_slot_rests_after_it_is_taken_and_says_until_when(flow_store: FlowStore) -> None:
    slot = flow_store.acquire_slot("acme", slots=1, holder="f1", now=NOW, cooldown_s=10).slot
    assert slot is not None and flow_store.release_slot(slot, holder="f1")
    assert not flow_store.release_slot(slot, holder="f1")  # once
    grant = flow_store.acquire_slot("acme", slots=1, holder="f2", now=NOW, cooldown_s=10)
    assert grant.slot is None and grant.free_at == NOW + timedelta(seconds=10)
    later = NOW + timedelta(seconds=10)
    assert flow_store.acquire_slot("acme", slots=1, holder="f2", now=later, cooldown_s=10).slot


def test_an_ended_flows_slot_is_handed_to_the_next_only_by_its_holder(
    flow_store: FlowStore,
) -> None:
    slot = flow_store.acquire_slot("acme", slots=1, holder="f1", now=NOW, cooldown_s=5).slot
    assert slot is not None
    soon = NOW + timedelta(seconds=1)
    assert not flow_store.hand_over_slot(slot, holder="f1", to="f2", now=soon, cooldown_s=5)
    later = NOW + timedelta(seconds=5)
    assert not flow_store.hand_over_slot(slot, holder="other", to="f2", now=later, cooldown_s=5)
    assert flow_store.hand_over_slot(slot, holder="f1", to="f2", now=later, cooldown_s=5)
    assert not flow_store.hand_over_slot(slot, holder="f1", to="f3", now=later, cooldown_s=5)
    assert flow_store.release_slot(slot, holder="f2")


def test_waiting_flows_are_listed_and_counted_oldest_first(flow_store: FlowStore) -> None:
    for i, tenant in enumerate(["acme", "globex", "acme", "acme"]):
        record = make_record(
            f"w{i}", tenant=tenant, admission="waiting", queued_at=NOW + timedelta(seconds=9 - i)
        )
        assert flow_store.create(record.model_copy(update={"tracks": {}}))
    assert flow_store.create(make_record("running", tenant="acme"))
    assert [r.flow_id for r in flow_store.waiting("acme", limit=5)] == ["w3", "w2", "w0"]
    assert [r.flow_id for r in flow_store.waiting(limit=2)] == ["w3", "w2"]
    assert flow_store.count_waiting("acme") == 3
    assert flow_store.count_waiting("globex") == 1

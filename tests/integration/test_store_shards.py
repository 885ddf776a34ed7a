"""relayflow.gcp.store's index shards and spread document ids against the Firestore emulator:
lists, the sweeper and admission ask every shard and merge (cursor paging unchanged for
users), sequential ids are stored under spread ids, and a document an earlier release wrote
at its bare key is still read, changed and finished."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from google.cloud import firestore

from relayflow.core.listing import Cursor, FlowFilter
from relayflow.core.records import FlowRecord
from relayflow.core.sharding import shard_of
from relayflow.core.state import Status
from relayflow.gcp.store import FlowStore, keys, merge
from relayflow.telemetry import Counters

from .support import make_record

pytestmark = pytest.mark.emulators

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SHARDS = 4


@pytest.fixture
def counters() -> Counters:
    return Counters()


@pytest.fixture
def sharded(firestore_client: firestore.Client, counters: Counters) -> FlowStore:
    return FlowStore(firestore_client, counters=counters, shards=SHARDS)


def _all_pages(store: FlowStore, filter: FlowFilter, limit: int) -> list[list[str]]:
    pages: list[list[str]] = []
    after: Cursor | None = None
    while True:
        page = store.flows(filter, after=after, limit=limit)
        pages.append([r.flow_id for r in page.items])
        if page.next is None:
            return pages
        after = Cursor.decode(page.next.encode())  # as a user hands it back


def test_pages_merged_over_shards_show_every_flow_once_newest_first(sharded: FlowStore) -> None:
    # 23 flows, two at each minute: a page of 5 ends inside a tie.
    made = []
    for i in range(23):
        status = Status.RUNNING if i % 3 else Status.SUCCEEDED
        record = make_record(f"p-{i:03d}", status=status, updated_at=T0 + timedelta(minutes=i // 2))
        assert sharded.create(record)
        made.append(record)
    assert len({shard_of(r.key, SHARDS) for r in made}) == SHARDS

    def expected(chosen: list[FlowRecord]) -> list[str]:
        ordered = sorted(chosen, key=lambda r: (r.updated_at, r.flow_id), reverse=True)
        return [r.flow_id for r in ordered]

    pages = _all_pages(sharded, FlowFilter(), 5)
    assert [len(p) for p in pages] == [5, 5, 5, 5, 3]
    assert [f for page in pages for f in page] == expected(made)
    running = [r for r in made if r.status is Status.RUNNING]
    pages = _all_pages(sharded, FlowFilter(status=Status.RUNNING), 5)
    assert [f for page in pages for f in page] == expected(running)
    summaries = sharded.summaries(FlowFilter(), limit=5)
    assert [s.flow_id for s in summaries.items] == expected(made)[:5]
    assert [r.flow_id for r in sharded.recent(limit=4)] == expected(made)[:4]


def test_a_page_reads_about_its_size_plus_a_batch_per_shard(
    sharded: FlowStore, counters: Counters
) -> None:
    for i in range(40):
        sharded.create(make_record(f"r-{i:03d}", updated_at=T0 + timedelta(seconds=i)))
    before = counters.snapshot().get("firestore_reads", 0)
    sharded.flows(FlowFilter(), limit=10)
    read = counters.snapshot()["firestore_reads"] - before
    assert read <= 2 * (10 + 1) + SHARDS * merge.BATCH, read


def test_counts_with_a_time_range_add_up_over_shards(sharded: FlowStore) -> None:
    for i in range(12):
        status = Status.RUNNING if i % 2 else Status.FAILED
        sharded.create(make_record(f"c-{i:03d}", status=status, updated_at=T0 + timedelta(hours=i)))
    window = FlowFilter(updated_from=T0 + timedelta(hours=2), updated_to=T0 + timedelta(hours=8))
    counts = sharded.count_by_status(window)
    assert counts[Status.RUNNING] == 3 and counts[Status.FAILED] == 3
    assert sum(sharded.count_by_status(FlowFilter()).values()) == 12


def test_the_sweeper_finds_overdue_flows_in_every_shard(sharded: FlowStore) -> None:
    made = []
    for i in range(12):
        due = T0 - timedelta(minutes=30 - i)
        record = make_record(f"o-{i:03d}", status=Status.RUNNING, next_run_at=due)
        assert sharded.create(record)
        made.append(record)
    sharded.create(make_record("not-yet", status=Status.RUNNING, next_run_at=T0 + timedelta(1)))
    assert len({shard_of(r.key, SHARDS) for r in made}) == SHARDS
    overdue = sharded.overdue(cutoff=T0)
    assert [r.flow_id for r in overdue] == [r.flow_id for r in made]  # most overdue first
    assert [r.flow_id for r in sharded.overdue(cutoff=T0, limit=3)] == ["o-000", "o-001", "o-002"]


def test_admission_admits_the_oldest_waiting_across_shards(sharded: FlowStore) -> None:
    for i in range(10):
        record = make_record(
            f"w-{i:03d}", tenant="acme", admission="waiting", queued_at=T0 + timedelta(seconds=i)
        )
        assert sharded.create(record.model_copy(update={"tracks": {}}))
    assert [r.flow_id for r in sharded.waiting("acme", limit=3)] == ["w-000", "w-001", "w-002"]
    assert [r.flow_id for r in sharded.waiting(limit=10)] == [f"w-{i:03d}" for i in range(10)]
    assert sharded.count_waiting("acme") == 10


def test_sequential_ids_are_stored_under_spread_ids(
    sharded: FlowStore, firestore_client: firestore.Client
) -> None:
    made = [make_record(f"order-{i:06d}") for i in range(20)]
    for record in made:
        assert sharded.create(record)
    stored = sorted(snap.id for snap in firestore_client.collection("flows").stream())
    assert stored == sorted(keys.document_id(r.key) for r in made)
    # In id order the flows are shuffled, not in their keys' order, and the prefixes differ.
    assert [keys.key_of(i) for i in stored] != sorted(r.key for r in made)
    assert len({i.split(":")[0] for i in stored}) == len(made)
    docs = {s.id: s.to_dict() for s in firestore_client.collection("flows").stream()}
    for record in made:
        assert docs[keys.document_id(record.key)]["shard"] == shard_of(record.key, SHARDS)
    assert sharded.get("order-000003") == made[3]


def test_a_lane_key_is_hashed_whole(sharded: FlowStore) -> None:
    lanes = [keys.document_id(f"order-000001.each.{n}") for n in range(8)]
    assert len({lane.split(":")[0] for lane in lanes}) == 8
    assert all(keys.key_of(lane) == f"order-000001.each.{n}" for n, lane in enumerate(lanes))


def test_a_legacy_document_is_read_changed_and_finished_where_it_lives(
    sharded: FlowStore, firestore_client: firestore.Client, counters: Counters
) -> None:
    legacy = make_record("old-1", status=Status.RUNNING, next_run_at=T0 - timedelta(minutes=1))
    bare = firestore_client.collection("flows").document("old-1")  # as an earlier release wrote
    bare.create(legacy.to_doc())

    assert sharded.get("old-1") == legacy
    assert counters.snapshot()["firestore_legacy_reads"] >= 1
    assert not sharded.create(legacy)  # a redelivered start makes no second flow
    assert sharded.overdue(cutoff=T0) == []  # not yet in a shard ...

    moved = T0 + timedelta(minutes=1)
    changed = sharded.change("old-1", lambda r: r.model_copy(update={"updated_at": moved}))
    assert changed is not None and changed.updated_at == moved
    assert bare.get().to_dict()["shard"] == shard_of("old-1", SHARDS)  # ... its first change
    spread = firestore_client.collection("flows").document(keys.document_id("old-1"))
    assert not spread.get().exists
    assert [r.flow_id for r in sharded.overdue(cutoff=T0)] == ["old-1"]
    assert [r.flow_id for r in sharded.flows(FlowFilter()).items] == ["old-1"]

    def finish(r: FlowRecord) -> FlowRecord:
        ended = {"status": Status.SUCCEEDED, "tracks": {}, "finished_at": moved}
        return r.model_copy(update=ended)

    done = sharded.change("old-1", finish)
    assert done is not None and done.status is Status.SUCCEEDED
    again = sharded.get("old-1")
    assert again is not None and again.status is Status.SUCCEEDED and again.finished_at == moved
    assert [d.id for d in firestore_client.collection("flows").stream()] == ["old-1"]


def test_an_unreadable_document_is_named_by_its_key_and_ended(
    sharded: FlowStore, firestore_client: firestore.Client
) -> None:
    record = make_record("bad-1", status=Status.RUNNING, next_run_at=T0 - timedelta(minutes=1))
    assert sharded.create(record)
    ref = firestore_client.collection("flows").document(keys.document_id("bad-1"))
    ref.update({"position": "not a position"})
    (found,) = sharded.overdue(cutoff=T0)
    assert getattr(found, "flow_id", None) == "bad-1"
    sharded.fail_unreadable("bad-1", reason="test", now=T0)
    assert ref.get().to_dict()["status"] == Status.FAILED.value


def test_rejected_records_are_spread_and_paged_over_shards(sharded: FlowStore) -> None:
    for i in range(9):
        body = {"kind": "message", "reason": "bad", "rejected_at": T0 + timedelta(seconds=i // 2)}
        sharded.reject(f"{1000 + i}", body)
    seen: list[str] = []
    after: Cursor | None = None
    while True:
        page = sharded.rejected_messages(after=after, limit=2)
        seen += [m.id for m in page.items]
        if page.next is None:
            break
        after = page.next
    assert sorted(seen) == [f"{1000 + i}" for i in range(9)] and len(seen) == 9
    assert sharded.rejected("1004") is not None and "shard" not in (sharded.rejected("1004") or {})


def test_migrating_gives_an_unchanged_legacy_flow_its_shard_so_the_sweeper_finds_it(
    sharded: FlowStore, firestore_client: firestore.Client
) -> None:
    # a flow an earlier release wrote, whose task was lost: nothing will change it again
    lost = make_record("old-2", status=Status.RUNNING, next_run_at=T0 - timedelta(minutes=5))
    firestore_client.collection("flows").document("old-2").create(lost.to_doc())
    rejected = firestore_client.collection("rejected").document("m-1")
    rejected.create({"rejected_at": T0, "reason": "bad", "message_id": "m-1"})
    sharded.create(make_record("new-1", status=Status.RUNNING))
    assert sharded.overdue(cutoff=T0) == []  # in no shard: the sweeper cannot see it
    heard: list[tuple[str, int, int]] = []

    report = sharded.give_shards(progress=lambda *seen: heard.append(seen))

    assert report.sharded == {"flows": 1, "flow_lanes": 0, "rejected": 1}
    assert report.scanned == {"flows": 2, "flow_lanes": 0, "rejected": 1}
    assert ("flows", 2, 1) in heard
    assert [r.flow_id for r in sharded.overdue(cutoff=T0)] == ["old-2"]
    assert rejected.get().to_dict()["shard"] == shard_of("m-1", SHARDS)
    assert sharded.give_shards().sharded == {"flows": 0, "flow_lanes": 0, "rejected": 0}


def test_finding_by_id_queries_a_spread_field_that_legacy_flows_get_by_change_or_migration(
    sharded: FlowStore, firestore_client: firestore.Client
) -> None:
    sharded.create(make_record("order-7", status=Status.RUNNING))
    stored = firestore_client.collection("flows").document(keys.document_id("order-7")).get()
    assert stored.to_dict()[keys.FIND_FIELD] == keys.find_value("order-7")
    assert keys.find_value("order-7") != "order-7" and keys.find_value("order-7").endswith(
        ":order-7"
    )
    # two flows an earlier release wrote: one changed since, one untouched
    for flow_id in ("old-7", "old-8"):
        firestore_client.collection("flows").document(flow_id).create(
            make_record(flow_id, status=Status.RUNNING).to_doc()
        )
    assert sharded.find("old-7") == [] and sharded.find("old-8") == []
    assert sharded.change("old-7", lambda r: r.model_copy(update={"attempts": 1})) is not None

    assert [r.flow_id for r in sharded.find("old-7")] == ["old-7"]
    assert sharded.find("old-8") == []
    report = sharded.give_shards()
    assert report.sharded["flows"] == 1  # old-8 (old-7 got shard and field by its change)
    assert [r.flow_id for r in sharded.find("old-8")] == ["old-8"]
    assert [r.flow_id for r in sharded.find("order-7")] == ["order-7"]

"""Every query the Firestore listing makes has the indexes it needs declared in the Terraform.

The emulator runs any query without an index; the cloud refuses one it has no index for. So
rather than trust a reading of the store's code, these tests run the store's listing over a
client that reaches nothing, capture each query it would send (for every filter, and every pair
of filters, as ``GET /flows`` and its counts take them), and check the query against the
indexes ``infra/terraform/modules/relayflow`` declares, by Firestore's rules:

- a list (equalities, at most one ``array-contains``, a range on ``updated_at``, ordered by
  ``updated_at`` then ``flow_id``, descending) is served by a composite index with exactly its
  fields, or by merging one index per filtered field, each ``(shard, field, *order)``
  (https://cloud.google.com/firestore/docs/query-data/index-overview#taking_advantage_of_index_merging;
  array-contains counts as an equality there);
- a count (no order) without the shard merges the fields' single-field indexes, which an
  exemption (of the field, or of a map it is inside) switches off; one with the shard merges
  ``(shard, field, …)`` composites, ``updated_at`` next when it has a range.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import firestore
from google.cloud.firestore_v1.query import Query
from tfconfig import MODULES, load

from relayflow.core.listing import FlowFilter, Uncountable
from relayflow.core.state import Status
from relayflow.gcp.store import FlowStore, merge

RELAYFLOW = MODULES / "relayflow"
FLOWS = "${local.topology.firestore.flows_collection}"
SHARD = ("shard", "ASCENDING")
LIST_ORDER = (("updated_at", "DESCENDING"), ("flow_id", "DESCENDING"))
EQUALITY = {"EQUAL": "ASCENDING", "ARRAY_CONTAINS": "CONTAINS"}
T0, T1 = datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 3, 2, tzinfo=UTC)

# Each filter GET /flows takes, as the api builds it (params.flow_filter).
FILTERS: dict[str, dict[str, Any]] = {
    "flow": {"flow": "orders"},
    "status": {"status": Status.FAILED},
    "version": {"version": 2},
    "tenant": {"tenant": "acme"},
    "parent": {"parent": "acme~p-1"},
    "label": {"labels": (("order_id", "123"),)},
    "labels": {"labels": (("order_id", "123"), ("region", "eu"))},
    "code": {"code": "RETRIES_EXHAUSTED"},
    "dependency": {"dependency": "payments"},
    "window": {"updated_from": T0, "updated_to": T1},
}
SHAPES = [(name,) for name in FILTERS] + [
    pair for pair in itertools.combinations(FILTERS, 2) if set(pair) != {"label", "labels"}
]

Index = tuple[tuple[str, str], ...]


def _declared() -> set[Index]:
    """The flows' composite indexes, each field as (path, order or array config)."""
    indexes = load(RELAYFLOW).modules["firestore"].body["composite_indexes"]
    return {
        tuple((f["field_path"], f.get("order") or f["array_config"]) for f in index["fields"])
        for index in indexes.values()
        if index["collection"] == FLOWS
    }


def _exempt() -> set[str]:
    """The flows' fields whose single-field indexes are switched off."""
    unindexed = load(RELAYFLOW).locals["unindexed_fields"]
    return set(unindexed["${(local.topology.firestore.flows_collection)}"])


class Asked:
    """The queries the listing sent: lists (one a shard) and count aggregations."""

    def __init__(self) -> None:
        self.lists: list[Any] = []
        self.counts: list[Any] = []


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FlowStore, Asked]]:
    seen = Asked()

    def merging(queries: list[Any], **_: Any) -> Iterator[Any]:
        seen.lists.extend(queries)
        return iter(())

    class Counted:
        def __init__(self, query: Any) -> None:
            self.query = query

        def get(self, **_: Any) -> list[list[Any]]:
            seen.counts.append(self.query)
            return [[SimpleNamespace(value=0)]]

    monkeypatch.setattr(merge, "merging", merging)
    monkeypatch.setattr(Query, "count", lambda query, alias=None: Counted(query))
    client = firestore.Client(project="relayflow-local", credentials=AnonymousCredentials())
    yield FlowStore(client, shards=2), seen


def _shape(query: Any) -> tuple[dict[str, str], tuple[tuple[str, str], ...]]:
    """A query's conditions (field: operator) and its order."""
    pb = query._to_protobuf()
    composite = pb.where.composite_filter.filters
    filters = [f.field_filter for f in composite] if composite else [pb.where.field_filter]
    conditions = {f.field.field_path: f.op.name for f in filters if f.field.field_path}
    order = tuple((o.field.field_path, o.direction.name) for o in pb.order_by)
    return conditions, order


def _list_served(conditions: dict[str, str], order: Index, indexes: set[Index]) -> bool:
    """Whether a list query is served: by one composite with exactly its fields, or by merging
    one ``(shard, field, *order)`` index per filtered field."""
    equal = {(f, EQUALITY[op]) for f, op in conditions.items() if op in EQUALITY}
    ranges = {f for f, op in conditions.items() if op not in EQUALITY}
    if SHARD not in equal or not ranges <= {order[0][0]}:
        return False  # a list is asked of one shard; a range only on its first order field
    equal.discard(SHARD)

    def exact(index: Index) -> bool:
        head, tail = index[: len(index) - len(order)], index[len(index) - len(order) :]
        return tail == order and head[:1] == (SHARD,) and sorted(head[1:]) == sorted(equal)

    merged = bool(equal) and all((SHARD, field, *order) in indexes for field in equal)
    return merged or any(exact(index) for index in indexes)


def _count_served(conditions: dict[str, str], indexes: set[Index], exempt: set[str]) -> bool:
    """Whether a count (no order) is served: its fields' single-field indexes merged, or with
    the shard, ``(shard, field, …)`` composites merged (``updated_at`` next, if a range)."""
    equal = {f: EQUALITY[op] for f, op in conditions.items() if op in EQUALITY}
    ranged = any(op not in EQUALITY for op in conditions.values())
    if "shard" not in equal:
        return not ranged and all(
            not any(".".join(f.split(".")[: i + 1]) in exempt for i in range(f.count(".") + 1))
            for f in equal
        )
    fields = [(f, mode) for f, mode in equal.items() if f != "shard"]
    return all(
        any(i[:2] == (SHARD, field) and (not ranged or i[2][0] == "updated_at") for i in indexes)
        for field in fields
    )


def _filter_of(shape: tuple[str, ...]) -> FlowFilter:
    return FlowFilter(**{k: v for name in shape for k, v in FILTERS[name].items()})


@pytest.mark.parametrize("shape", SHAPES, ids="+".join)
def test_every_list_query_the_store_makes_has_its_index(
    asked: tuple[FlowStore, Asked], shape: tuple[str, ...]
) -> None:
    store, seen = asked
    store.summaries(_filter_of(shape), limit=10)
    store.flows(_filter_of(shape), limit=10)
    indexes = _declared()
    assert len(seen.lists) == 2 * store.shards  # each shard asked, for each list
    for query in seen.lists:
        conditions, order = _shape(query)
        assert order == LIST_ORDER, "the store pages another way: change the indexes with it"
        assert _list_served(conditions, order, indexes), (shape, conditions)


@pytest.mark.parametrize("shape", SHAPES, ids="+".join)
def test_every_count_the_store_makes_has_its_indexes(
    asked: tuple[FlowStore, Asked], shape: tuple[str, ...]
) -> None:
    store, seen = asked
    wanted = _filter_of(shape)
    if wanted.sifted:  # more labels than a count can ask: refused, not sent
        with pytest.raises(Uncountable, match="one label at most"):
            store.count_by_status(wanted)
        assert not seen.counts
        return
    store.count_by_status(wanted)
    assert seen.counts
    indexes, exempt = _declared(), _exempt()
    for query in seen.counts:
        conditions, _ = _shape(query)
        assert _count_served(conditions, indexes, exempt), (shape, conditions)


def test_several_labels_ask_the_index_one_and_the_list_checks_the_others(
    asked: tuple[FlowStore, Asked],
) -> None:
    # Firestore takes one array-contains filter a query: the first label is asked
    store, seen = asked
    store.summaries(_filter_of(("labels",)), limit=10)
    for query in seen.lists:
        conditions, _ = _shape(query)
        assert conditions == {"shard": "EQUAL", "label_index": "ARRAY_CONTAINS"}
        pb = query._to_protobuf()
        (label,) = [
            f.field_filter.value.string_value
            for f in pb.where.composite_filter.filters
            if f.field_filter.field.field_path == "label_index"
        ]
        assert label == "order_id=123"
        assert "labels" in [f.field_path for f in pb.select.fields]  # what it checks the rest on


def test_the_checks_find_a_query_whose_index_is_missing(asked: tuple[FlowStore, Asked]) -> None:
    # The checks above can fail: without list_label a label list is not served, and a count
    # by code without its shard would need result.code's single-field index, which is off.
    store, seen = asked
    store.summaries(_filter_of(("label", "status")), limit=10)
    conditions, order = _shape(seen.lists[0])
    without = {i for i in _declared() if ("label_index", "CONTAINS") not in i}
    assert _list_served(conditions, order, _declared())
    assert not _list_served(conditions, order, without)
    unsharded = {"status": "EQUAL", "result.code": "EQUAL"}
    assert not _count_served(unsharded, _declared(), _exempt())
    assert _count_served({"status": "EQUAL", "dependency": "EQUAL"}, _declared(), _exempt())

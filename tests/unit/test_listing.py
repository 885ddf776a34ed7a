"""Listing flows: filters, newest first, cursor paging, summaries, counts per status.

``ListingContract`` is what any Store must do; here it runs against MemoryStore, and
tests/integration/test_listing.py runs the same tests against Firestore (the emulator).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from relayflow.core import listing
from relayflow.core.listing import Cursor, FlowFilter, FlowSummary, InvalidCursor, Uncountable
from relayflow.core.ports import Store
from relayflow.core.position import Position, TaskKind
from relayflow.core.records import FlowRecord, Result, parent_spread
from relayflow.core.state import Status
from relayflow.testing import MemoryStore

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def record(
    flow_id: str,
    *,
    minute: int,
    status: Status = Status.RUNNING,
    flow: str = "orders",
    version: int = 1,
    **fields: Any,
) -> FlowRecord:
    at = T0 + timedelta(minutes=minute)
    values: dict[str, Any] = {
        "flow_id": flow_id,
        "flow": flow,
        "version": version,
        "input": {"n": minute},
        "status": status,
        "position": Position(step_index=1, step="await_label", kind=TaskKind.POLL, poll=3),
        "step_started_at": at,
        "created_at": T0,
        "updated_at": at,
        "polls": 3,
        "attempts": 2,
    }
    return FlowRecord.model_validate({**values, **fields})


def seed(store: Store) -> list[FlowRecord]:
    """Twelve flows: orders v1/v2 and billing, in every status, one a minute apart."""
    statuses = [Status.RUNNING, Status.SUCCEEDED, Status.FAILED, Status.PENDING]
    made = [
        record(
            f"f-{i:02d}",
            minute=i,
            status=statuses[i % 4],
            flow="billing" if i % 3 == 0 else "orders",
            version=1 + i % 2,
        )
        for i in range(12)
    ]
    for r in made:
        assert store.create(r)
    return made


def ids(items: list[Any]) -> list[str]:
    return [getattr(item, "flow_id", None) or item.id for item in items]


class ListingContract:
    """Each test seeds a fresh ``store`` (a fixture of the subclass)."""

    def test_flows_are_listed_newest_update_first(self, store: Store) -> None:
        seed(store)
        page = store.flows(FlowFilter(), limit=50)
        assert ids(page.items) == [f"f-{i:02d}" for i in reversed(range(12))]
        assert page.next is None

    def test_matching_reads_every_flow_a_filter_admits_and_one_past_the_limit(
        self, store: Store
    ) -> None:
        made = seed(store)
        assert sorted(ids(store.matching(FlowFilter(), limit=100))) == sorted(ids(made))
        wanted = FlowFilter(status=Status.FAILED, flow="orders", updated_from=T0)
        found = store.matching(wanted, limit=100)
        assert sorted(ids(found)) == sorted(ids([r for r in made if wanted.matches(r)]))
        assert found and all(r.status is Status.FAILED for r in found)
        assert found[0].input  # whole documents, not summaries
        assert len(store.matching(FlowFilter(), limit=4)) == 5  # one more: there are more

    def test_a_cursor_walks_every_page_once_in_order(self, store: Store) -> None:
        seed(store)
        seen: list[str] = []
        cursor: Cursor | None = None
        pages = 0
        while True:
            page = store.flows(FlowFilter(), after=cursor, limit=5)
            seen += ids(page.items)
            pages += 1
            if page.next is None:
                break
            cursor = Cursor.decode(page.next.encode())  # through its opaque form, as callers do
        assert pages == 3
        assert seen == [f"f-{i:02d}" for i in reversed(range(12))]

    def test_a_full_last_page_says_there_is_no_next(self, store: Store) -> None:
        seed(store)
        first = store.flows(FlowFilter(), limit=6)
        second = store.flows(FlowFilter(), after=first.next, limit=6)
        assert len(second.items) == 6
        assert second.next is None

    def test_a_parent_s_children_are_listed_by_its_key_a_page_at_a_time(self, store: Store) -> None:
        # given two parents' children (their documents carry parent_spread) and other flows
        seed(store)
        for n, parent in enumerate(["p-1", "p-1", "p-2", "p-1"]):
            child = record(f"{parent}-c{n}", minute=20 + n)
            store.create(child.model_copy(update={"parent_spread": parent_spread(parent)}))
        # then a list by parent shows that parent's, newest first, and pages like any list
        first = store.flows(FlowFilter(parent="p-1"), limit=2)
        rest = store.flows(FlowFilter(parent="p-1"), after=first.next, limit=2)
        assert ids(first.items) + ids(rest.items) == ["p-1-c3", "p-1-c1", "p-1-c0"]
        assert ids(store.flows(FlowFilter(parent="p-2")).items) == ["p-2-c2"]
        assert store.flows(FlowFilter(parent="p-3")).items == []
        assert store.count_by_status(FlowFilter(parent="p-1"))[Status.RUNNING] == 3

    def test_a_label_lists_the_flows_that_carry_it_a_page_at_a_time(self, store: Store) -> None:
        # given flows labelled by order, and others
        seed(store)
        for n, order in enumerate(["123", "456", "123", "123"]):
            labelled = record(
                f"o-{n}", minute=20 + n, status=Status.FAILED if n else Status.RUNNING
            )
            store.create(labelled.model_copy(update={"labels": {"order_id": order, "n": str(n)}}))
        by_order = FlowFilter(labels=(("order_id", "123"),))
        # then a list by label shows them newest first, and pages like any list
        first = store.flows(by_order, limit=2)
        rest = store.summaries(by_order, after=first.next, limit=2)
        assert ids(first.items) + ids(rest.items) == ["o-3", "o-2", "o-0"]
        assert rest.next is None
        assert rest.items[0].labels == {"order_id": "123", "n": "0"}  # summaries carry them
        assert ids(store.flows(FlowFilter(labels=(("order_id", "789"),))).items) == []
        # and combines with the other filters; counts take it too
        failed = FlowFilter(labels=(("order_id", "123"),), status=Status.FAILED)
        assert ids(store.flows(failed).items) == ["o-3", "o-2"]
        counts = store.count_by_status(failed)
        assert (counts[Status.FAILED], counts[Status.RUNNING], sum(counts.values())) == (2, 1, 3)

    def test_several_labels_list_the_flows_that_carry_them_all(self, store: Store) -> None:
        eu, us = {"order_id": "1", "region": "eu"}, {"order_id": "1", "region": "us"}
        made = [
            record(f"m-{n}", minute=n).model_copy(update={"labels": labels})
            for n, labels in enumerate([eu, {"order_id": "1"}, us, eu, {"region": "eu"}])
        ]
        for r in made:
            store.create(r)
        both = FlowFilter(labels=(("order_id", "1"), ("region", "eu")))
        assert ids(store.flows(both).items) == ["m-3", "m-0"]
        assert [r.flow_id for r in reversed(made) if both.matches(r)] == ["m-3", "m-0"]
        # a page of one: the flows in between that lack the second label are passed over
        first = store.summaries(both, limit=1)
        rest = store.summaries(both, after=first.next, limit=1)
        assert (ids(first.items), ids(rest.items), rest.next) == (["m-3"], ["m-0"], None)
        with pytest.raises(Uncountable, match="one label at most"):
            store.count_by_status(both)

    def test_a_page_that_checks_labels_stops_after_max_sifted_flows_and_goes_on_from_there(
        self, store: Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(listing, "MAX_SIFTED", 2)
        for n in range(6):  # only the oldest carries both
            labels = {"order_id": "1", "region": "eu" if n == 0 else "us"}
            store.create(record(f"s-{n}", minute=n).model_copy(update={"labels": labels}))
        both = FlowFilter(labels=(("order_id", "1"), ("region", "eu")))
        # a page of 1 reads at most 1 + 1 + 2 flows: s-5..s-2, none of them in the list
        first = store.flows(both, limit=1)
        assert first.items == [] and first.next == Cursor(T0 + timedelta(minutes=2), "s-2")
        rest = store.flows(both, after=first.next, limit=1)
        assert (ids(rest.items), rest.next) == (["s-0"], None)

    def test_flows_are_listed_by_result_code_and_by_dependency(self, store: Store) -> None:
        seed(store)
        ended = [
            ("RETRIES_EXHAUSTED", "payments"),
            ("DECLINED", "payments"),
            ("RETRIES_EXHAUSTED", None),
        ]
        for n, (code, dependency) in enumerate(ended):
            result = Result(status=Status.FAILED, code=code, message="no")
            done = record(f"e-{n}", minute=30 + n, status=Status.FAILED, result=result)
            store.create(done.model_copy(update={"dependency": dependency}))
        held = record("h-0", minute=40).model_copy(update={"dependency": "payments"})
        store.create(held)
        by_code = FlowFilter(code="RETRIES_EXHAUSTED")
        assert ids(store.flows(by_code).items) == ["e-2", "e-0"]
        assert store.count_by_status(by_code) == {s: 2 if s is Status.FAILED else 0 for s in Status}
        by_dependency = FlowFilter(dependency="payments")
        assert ids(store.summaries(by_dependency).items) == ["h-0", "e-1", "e-0"]
        assert store.summaries(by_dependency).items[0].dependency == "payments"
        both = FlowFilter(dependency="payments", code="RETRIES_EXHAUSTED", status=Status.FAILED)
        assert ids(store.flows(both).items) == ["e-0"]
        counts = store.count_by_status(FlowFilter(dependency="payments"))
        assert (counts[Status.FAILED], counts[Status.RUNNING]) == (2, 1)

    def test_ties_in_time_are_broken_by_id(self, store: Store) -> None:
        for flow_id in ("t-a", "t-c", "t-b"):
            store.create(record(flow_id, minute=0))
        first = store.flows(FlowFilter(), limit=2)
        rest = store.flows(FlowFilter(), after=first.next, limit=2)
        assert ids(first.items) + ids(rest.items) == ["t-c", "t-b", "t-a"]

    def test_filters_narrow_by_flow_status_version_and_time(self, store: Store) -> None:
        made = seed(store)
        wanted = FlowFilter(
            flow="orders",
            status=Status.SUCCEEDED,
            version=2,
            updated_from=T0 + timedelta(minutes=2),
            updated_to=T0 + timedelta(minutes=9),  # exclusive: minute 9 is left out
        )
        # f-01 is an orders v2 that succeeded before the window; f-09 is billing
        assert [r.flow_id for r in reversed(made) if wanted.matches(r)] == ["f-05"]
        assert ids(store.flows(wanted).items) == ["f-05"]

    def test_summaries_carry_what_a_list_shows(self, store: Store) -> None:
        ended = record(
            "s-1",
            minute=5,
            status=Status.FAILED,
            finished_at=T0 + timedelta(minutes=5),
            result=Result(status=Status.FAILED, code="REFUSED", message="no"),
        )
        store.create(ended)
        (summary,) = store.summaries(FlowFilter()).items
        assert summary == FlowSummary(
            flow_id="s-1",
            flow="orders",
            version=1,
            status=Status.FAILED,
            position="await_label poll 3",
            generation=0,
            polls=3,
            attempts=2,
            created_at=T0,
            updated_at=T0 + timedelta(minutes=5),
            finished_at=T0 + timedelta(minutes=5),
            code="REFUSED",
        )

    def test_summaries_page_like_flows(self, store: Store) -> None:
        seed(store)
        first = store.summaries(FlowFilter(flow="orders"), limit=4)
        second = store.summaries(FlowFilter(flow="orders"), after=first.next, limit=4)
        assert ids(first.items) + ids(second.items) == ids(
            store.flows(FlowFilter(flow="orders")).items
        )

    def test_counts_per_status_ignore_the_status_filter_and_keep_the_others(
        self, store: Store
    ) -> None:
        made = seed(store)
        counts = store.count_by_status(FlowFilter(flow="orders", status=Status.FAILED))
        orders = [r for r in made if r.flow == "orders"]
        assert counts == {s: sum(1 for r in orders if r.status is s) for s in Status}
        assert sum(counts.values()) == len(orders) == 8

    def test_counts_only_the_statuses_asked_for(self, store: Store) -> None:
        # What GET /versions counts: the flows not ended on one version, never the ended ones.
        made = seed(store)
        asked = (Status.PENDING, Status.RUNNING, Status.COMPENSATING)
        counts = store.count_by_status(FlowFilter(flow="orders", version=2), statuses=asked)
        on_v2 = [r for r in made if (r.flow, r.version) == ("orders", 2)]
        assert counts == {
            s: sum(1 for r in on_v2 if r.status is s) if s in asked else 0 for s in Status
        }
        assert counts[Status.PENDING] == 2 and len(on_v2) == 4  # the two SUCCEEDED not counted

    def test_rejected_messages_are_listed_newest_first_with_their_reasons(
        self, store: Store
    ) -> None:
        for i in range(5):
            store.reject(
                f"m-{i}",
                {
                    "message_id": f"m-{i}",
                    "reason": f"flow: field required ({i})",
                    "data_base64": "eyJmbG93IjogMX0=",  # {"flow": 1}
                    "data_truncated": False,
                    "attributes": {"k": "v"},
                    "rejected_at": T0 + timedelta(minutes=i),
                },
            )
        first = store.rejected_messages(limit=3)
        rest = store.rejected_messages(after=first.next, limit=3)
        assert ids(first.items) + ids(rest.items) == ["m-4", "m-3", "m-2", "m-1", "m-0"]
        assert rest.next is None
        assert first.items[0].reason == "flow: field required (4)"
        assert first.items[0].data == '{"flow": 1}'
        assert first.items[0].attributes == {"k": "v"}


class TestMemoryStoreListing(ListingContract):
    @pytest.fixture
    def store(self) -> MemoryStore:
        return MemoryStore()


def test_a_cursor_round_trips_through_its_opaque_form() -> None:
    cursor = Cursor(T0 + timedelta(microseconds=123456), "flow-1")
    assert Cursor.decode(cursor.encode()) == cursor
    assert "flow-1" not in cursor.encode()


@pytest.mark.parametrize(
    "text", ["", "not-base64!", "bm90IGpzb24", "WyIyMDI2LTAxLTAxIiwgImEiXQ", "WzEsIDJd"]
)
def test_a_cursor_not_made_here_is_refused(text: str) -> None:
    # "not json", a naive time, numbers
    with pytest.raises(InvalidCursor, match="cursor is not one this service gave out"):
        Cursor.decode(text)

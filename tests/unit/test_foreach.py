"""relayflow.core.foreach: one small flow per item, at most `concurrency` items at a time,
each with its own idempotency key, retries and polls; outputs in the list's order; a failing
item undone at once, too many failing the flow with everything undone newest first. Item state
lives in lane documents, never in the flow's. Through relayflow.testing's time-skipping
harness; then the module's own functions, on their own."""

from __future__ import annotations

import re
from typing import Any

import pytest

from relayflow import ActionStep, Flow, NotReady, PermanentError, PollPolicy, PollStep, StepContext
from relayflow.core import foreach
from relayflow.core.flows import ForEach
from relayflow.core.state import TERMINAL, Status
from relayflow.testing import Harness, scripted

POLL = PollPolicy(initial_s=5.0, multiplier=1.0, max_interval_s=5.0, jitter=0.0)


class Api:
    """Creates keyed by idempotency key; what is live."""

    def __init__(self, refuse: set[int] | None = None) -> None:
        self.made: dict[str, str] = {}
        self.live: set[str] = set()
        self.refuse = refuse or set()
        self.order: list[str] = []  # effects in the order they were made, and undone

    def create(self, ctx: StepContext) -> dict[str, Any]:
        if ctx.item_index in self.refuse:
            raise PermanentError(f"item {ctx.item_index} refused", code="REFUSED")
        key = ctx.idempotency_key
        if key not in self.made:
            self.made[key] = f"r{ctx.item_index}"
            self.live.add(self.made[key])
            self.order.append(f"+{self.made[key]}")
        return {"id": self.made[key], "value": ctx.item["value"] * 2}

    def delete(self, ctx: StepContext) -> dict[str, Any]:
        done = ctx.outputs.get("register") or self.create_replay(ctx)
        self.live.discard(done["id"])
        self.order.append(f"-{done['id']}")
        return {}

    def create_replay(self, ctx: StepContext) -> dict[str, Any]:
        return {"id": self.made[ctx.action_key]}


def flow(api: Api, *, items: int, concurrency: int, tolerate: int = 0, last: Any = None) -> Flow:
    def ready(ctx: StepContext) -> dict[str, Any]:
        if ctx.poll < 1:
            raise NotReady("activating")
        return {"active": True, "value": ctx.outputs["register"]["value"]}

    return Flow(
        name="batch",
        steps=(
            ActionStep("prepare", scripted({"n": items}), compensate=scripted({})),
            ForEach(
                "each",
                items=lambda ctx: [{"value": i} for i in range(ctx.outputs["prepare"]["n"])],
                steps=(
                    ActionStep("register", api.create, compensate=api.delete),
                    PollStep("await_active", ready, policy=POLL),
                ),
                concurrency=concurrency,
                tolerate=tolerate,
            ),
            ActionStep("report", last or scripted({"done": True})),
        ),
    )


def in_flight(h: Harness) -> int:
    """Items whose steps are running now, across the lanes."""
    return sum(
        1
        for doc_id, doc in h.store.docs.items()
        if "." in doc_id and doc["status"] not in TERMINAL and doc["tracks"]
    )


def test_fifty_items_at_concurrency_ten_never_run_more_than_ten_and_keep_their_order() -> None:
    api = Api()
    h = Harness(flow(api, items=50, concurrency=10))
    flow_id = h.start("batch")
    most = 0
    while h.flow(flow_id).status not in TERMINAL:
        h.deliver_next()
        most = max(most, in_flight(h))
    record = h.flow(flow_id)
    assert record.status is Status.SUCCEEDED
    assert most == 10
    output = record.outputs["each"]
    assert [item["value"] for item in output["items"]] == [2 * i for i in range(50)]
    assert output["failed"] == []
    assert len(record.lanes) == 10
    # the flow's document never held an item's state: it was written a few times per lane
    assert "items" not in h.store.docs[flow_id] or h.store.docs[flow_id]["items"] == []
    assert len(api.live) == 50


def test_each_item_has_its_own_idempotency_key() -> None:
    api = Api()
    h = Harness(flow(api, items=5, concurrency=2))
    h.run(h.start("batch"))
    keys = [c.idempotency_key for c in h.calls_of("register")]
    assert len(set(keys)) == 5
    assert all(f"each[{i}].register" in key for i, key in enumerate(sorted(keys)))


def test_a_failing_item_fails_the_flow_and_everything_is_undone_newest_first() -> None:
    api = Api(refuse={7})
    h = Harness(flow(api, items=12, concurrency=3))
    record = h.run(h.start("batch"))
    assert record is not None and record.status is Status.FAILED
    assert record.result is not None and record.result.code == "ITEMS_FAILED"
    assert api.live == set()
    # undone in the reverse of the order the effects were made (item effects, then prepare)
    made = [e[1:] for e in api.order if e.startswith("+")]
    undone = [e[1:] for e in api.order if e.startswith("-")]
    assert undone == list(reversed(made))
    assert [c.step for c in h.calls if c.kind == "compensate"][-1] == "prepare"


def test_tolerated_failures_are_reported_and_the_flow_goes_on() -> None:
    api = Api(refuse={2, 5})
    h = Harness(flow(api, items=8, concurrency=4, tolerate=2))
    record = h.run(h.start("batch"))
    assert record is not None and record.status is Status.SUCCEEDED
    output = record.outputs["each"]
    assert output["failed"] == [2, 5]
    assert output["items"][2] is None and output["items"][5] is None
    assert output["items"][3] == {"active": True, "value": 6}  # its last step's output
    assert len(api.live) == 6


def test_no_items_is_done_at_once() -> None:
    h = Harness(flow(Api(), items=0, concurrency=4))
    record = h.run(h.start("batch"))
    assert record is not None and record.status is Status.SUCCEEDED
    assert record.outputs["each"] == {"items": [], "failed": []}
    assert record.lanes == []


def test_every_task_delivered_twice_makes_each_item_effect_once() -> None:
    api = Api()
    h = Harness(flow(api, items=9, concurrency=3), duplicate_deliveries=True)
    record = h.run(h.start("batch"))
    assert record is not None and record.status is Status.SUCCEEDED
    assert len(api.made) == 9 and len(api.live) == 9
    assert len(h.results()) == 1


def test_a_failure_after_the_foreach_undoes_its_items_too() -> None:
    api = Api()
    h = Harness(flow(api, items=4, concurrency=2, last=scripted(PermanentError("no report"))))
    record = h.run(h.start("batch"))
    assert record is not None and record.status is Status.FAILED
    assert api.live == set()
    assert record.gathered is True


def test_cancel_stops_the_lanes_and_undoes_what_the_items_did() -> None:
    api = Api()
    h = Harness(flow(api, items=20, concurrency=4))
    flow_id = h.start("batch")
    for _ in range(12):
        h.deliver_next()
    assert api.live  # some items have registered
    h.cancel(flow_id, "stop")
    record = h.run(flow_id)
    assert record is not None and record.status is Status.CANCELLED
    assert api.live == set()
    lanes = [doc for doc_id, doc in h.store.docs.items() if "." in doc_id]
    assert all(doc["status"] in ("CANCELLED", "SUCCEEDED") for doc in lanes)


def test_items_that_await_a_callback_resume_when_their_tokens_are_completed() -> None:
    from relayflow.core.engine import Completion
    from relayflow.core.flows import CallbackStep

    h = Harness(
        Flow(
            name="fleet",
            steps=(
                ForEach(
                    "each",
                    items=lambda ctx: ["a", "b", "c"],
                    steps=(CallbackStep("activate", scripted({"sent": True}), timeout_s=600),),
                    concurrency=2,
                ),
            ),
        )
    )
    flow_id = h.start("fleet")
    for _ in range(3):  # the fan-out, then each lane's first item sends
        h.deliver_next()
    lanes = [doc_id for doc_id in h.store.docs if "." in doc_id]
    tokens = [h.token(lane, "activate") for lane in sorted(lanes)]
    assert all(token.startswith(f"{flow_id}.each.") for token in tokens)
    for token in tokens:
        assert h.complete(token, {"active": True}).outcome is Completion.COMPLETED
    h.deliver_next()  # lane 0 starts its second item, "c"
    h.deliver_next()
    third = h.token(f"{flow_id}.each.0", "activate")
    assert h.complete(third, {"active": "late but in time"}).outcome is Completion.COMPLETED
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED
    assert record.outputs["each"]["items"] == [
        {"active": True},
        {"active": True},
        {"active": "late but in time"},
    ]


def test_a_later_failure_undoes_items_that_awaited_callbacks_with_what_they_sent() -> None:
    from relayflow.core.flows import CallbackStep

    undo = scripted({})
    h = Harness(
        Flow(
            name="f",
            steps=(
                ForEach(
                    "each",
                    items=lambda ctx: ["a"],
                    steps=(
                        CallbackStep(
                            "activate", scripted({"sent": 1}), timeout_s=60, compensate=undo
                        ),
                    ),
                ),
                ActionStep("last", scripted(PermanentError("no"))),
            ),
        )
    )
    flow_id = h.start("f")
    h.deliver_next()
    h.deliver_next()
    h.complete(h.token(f"{flow_id}.each.0", "activate"), {"active": True})
    record = h.run(flow_id)
    assert record is not None and record.status is Status.FAILED
    (ctx,) = undo.calls
    assert (ctx.item, ctx.item_index) == ("a", 0)  # the item, though the flow runs the undo
    assert ctx.outputs["activate"] == {"sent": 1}  # what its run answered


# What the tests above reach through the engine, on its own: listing the items, a lane's news.
CONTEXT = StepContext(
    flow_id="b-1", flow="batch", step="each", input={}, outputs={}, idempotency_key="k"
)


def listing(items: Any) -> ForEach:
    return ForEach("each", items=lambda ctx: items, steps=(ActionStep("charge", scripted({})),))


def test_items_may_be_any_sequence_of_storable_json_and_are_listed() -> None:
    assert foreach.list_items(listing(("a", {"b": [1]})), CONTEXT) == ["a", {"b": [1]}]


@pytest.mark.parametrize(
    ("items", "says"),
    [
        ({"a": 1}, "items of 'each' is a dict, not a list"),
        (list(range(foreach.MAX_ITEMS + 1)), f"'each' has {foreach.MAX_ITEMS + 1} items; at most"),
        (["x" * foreach.MAX_ITEMS_BYTES], "items of each is"),
    ],
    ids=["not-a-list", "too-many", "too-large"],
)
def test_items_that_are_not_a_bounded_list_are_bad(items: Any, says: str) -> None:
    with pytest.raises(foreach.BadItems, match=re.escape(says)):
        foreach.list_items(listing(items), CONTEXT)


def test_a_lanes_news_is_what_it_has_not_told_its_flow_yet() -> None:
    h = Harness(flow(Api(refuse={1}), items=4, concurrency=2, tolerate=1))
    record = h.run(h.start("batch"))
    assert record is not None and record.status is Status.SUCCEEDED
    lane = h.flow(record.lanes[1])  # items 1 and 3: item 1 refused
    assert lane.failed_items == [1] and lane.reported_failures == 1 and lane.result_published
    assert foreach.news(lane) is None  # its flow heard everything
    unheard = lane.model_copy(update={"reported_failures": 0, "result_published": False})
    assert foreach.news(unheard) == ([1], True)
    assert foreach.news(unheard.model_copy(update={"result_published": True})) == ([1], False)


def test_a_lane_runs_its_foreachs_item_steps_as_a_flow() -> None:
    items = foreach.item_flow(flow(Api(), items=1, concurrency=1), "each")
    assert [step.name for step in items.steps] == ["register", "await_active"]


def test_a_lane_that_aborts_fails_the_foreach_instead_of_joining_nones() -> None:
    # Each item's output is kept on its effect for its undo: five of 200 KB overflow the lane.
    def big(ctx: StepContext) -> dict[str, Any]:
        return {"pad": "p" * 200_000}

    each = ForEach(
        "each",
        items=lambda ctx: list(range(5)),
        steps=(ActionStep("big", big, compensate=lambda ctx: {}),),
        concurrency=1,
    )
    h = Harness(Flow(name="overflow", steps=(each,)))
    flow_id = h.start("overflow", {})

    record = h.run(flow_id)

    assert record is not None and record.status is Status.FAILED
    assert record.result is not None and record.result.error is not None
    assert record.result.error["code"] == "DOCUMENT_TOO_LARGE"
    assert "lane 0 of each ended FAILED" in record.result.error["message"]


class FailsOnce:
    """A last step that fails for good on its first call and succeeds after."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, ctx: StepContext) -> dict[str, Any]:
        self.calls += 1
        if self.calls == 1:
            raise PermanentError("no report yet", code="NO_REPORT")
        return {"done": True}


def test_a_retry_runs_again_the_items_the_flows_end_undid() -> None:
    # given a flow whose step after its ForEach failed for good, its items' effects undone
    api = Api()
    h = Harness(flow(api, items=4, concurrency=2, last=FailsOnce()))
    flow_id = h.start("batch")
    first = h.run(flow_id)
    assert first is not None and first.status is Status.FAILED and api.live == set()
    first_keys = {c.idempotency_key for c in h.calls_of("register")}

    # when an operator retries it, its dry run saying what runs again
    preview = h.engine.preview(first, "retry")
    assert preview.rerun == ("prepare", "each", "report")
    assert preview.detail["items"] == "ForEach each runs its items again, in lanes of generation 1"
    h.retry(flow_id)
    record = h.run(flow_id)

    # then its items run again, under fresh keys, and what the flow says it made is live
    assert record is not None and record.status is Status.SUCCEEDED, record.result
    again = [c.idempotency_key for c in h.calls_of("register")][len(first_keys) :]
    assert len(set(again)) == 4 and not set(again) & first_keys
    assert len(api.live) == 4
    assert [item["value"] for item in record.outputs["each"]["items"]] == [0, 2, 4, 6]


def test_a_retry_that_fails_again_undoes_the_items_it_ran_again() -> None:
    # given a retried flow whose items ran again, then its last step failed once more
    api = Api()
    always = scripted(PermanentError("still no report", code="NO_REPORT"))
    h = Harness(flow(api, items=3, concurrency=2, last=always))
    flow_id = h.start("batch")
    h.run(flow_id)
    h.retry(flow_id)
    record = h.run(flow_id)

    # then what the items made the second time was undone too
    assert record is not None and record.status is Status.FAILED
    assert len(api.made) == 6 and api.live == set()


def test_a_retry_of_a_flow_whose_items_failed_runs_every_item_in_fresh_lanes() -> None:
    # given a flow that failed because an item was refused, everything undone
    api = Api(refuse={1})
    h = Harness(flow(api, items=5, concurrency=2))
    flow_id = h.start("batch")
    first = h.run(flow_id)
    assert first is not None and first.result is not None
    assert first.result.code == "ITEMS_FAILED" and api.live == set()
    old_lanes = set(first.lanes)
    first_keys = {c.idempotency_key for c in h.calls_of("register")}

    # when the client API takes the item now and an operator retries the flow
    api.refuse.clear()
    h.retry(flow_id)
    record = h.run(flow_id)
    again = {c.idempotency_key for c in h.calls_of("register")} - first_keys

    # then the ForEach ran its five items in lanes of the new generation, the old ones as
    # they ended, each under a key none of the first run's calls sent (the refused item's
    # too: its lane undid it itself, and the flow counted it when it gathered the lanes)
    assert record is not None and record.status is Status.SUCCEEDED, record.result
    assert len(again) == 5
    assert len(api.live) == 5 and record.outputs["each"]["failed"] == []
    assert record.lanes and not set(record.lanes) & old_lanes
    assert all(lane.endswith(".g1") for lane in record.lanes)
    assert all(h.store.get(lane).status in TERMINAL for lane in old_lanes)  # type: ignore[union-attr]

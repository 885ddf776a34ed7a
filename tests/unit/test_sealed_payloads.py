"""Sensitive fields in offloaded payloads (the harness: the engine in memory, its bucket
``MemoryBlobs``, sealing with an AES-SIV key). Sealing is a codec placed before offload in the
engine's chain (``Kernel.codec``), so a value is sealed before it is measured and written to
the bucket: neither the bucket's objects nor the documents hold a sensitive value in clear,
and the handlers read them in clear. Each place a value enters a flow is covered: the start
input, a step's output (and the result made of it), a callback's completion, a child's input
and result, a ForEach's items' outputs (lanes, their pages and the join)."""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BaseModel

from relayflow import (
    ActionStep,
    CallbackStep,
    ChildFlow,
    Flow,
    ForEach,
    Sensitive,
    StepContext,
)
from relayflow.core.payloads import MIN_THRESHOLD_BYTES, PAGE_BYTES, refs
from relayflow.core.sealing import is_sealed
from relayflow.core.state import Status
from relayflow.testing import Harness

CARD, TOKEN, PIN = "4111111111111111", "tok_5e1f0c4a9b", "PIN-9911"
PAD = "z" * 4000  # a value this large goes to the bucket (the threshold: 1 KiB)


class Order(BaseModel):
    card: Annotated[str, Sensitive]
    notes: str


def order() -> dict[str, Any]:
    return {"card": CARD, "notes": PAD}


def harness(*flows: Flow) -> Harness:
    return Harness(flows, offload_threshold_bytes=MIN_THRESHOLD_BYTES)


def held(h: Harness) -> str:
    """Everything the bucket and the documents hold, as text."""
    objects = [data.decode() for data in h.blobs.objects.values()]
    return "\n".join([*objects, json.dumps(h.store.docs, default=str)])


def assert_sealed_everywhere(h: Harness, *secrets: str) -> None:
    text = held(h)
    assert h.blobs.objects, "nothing was offloaded: the test would prove nothing"
    assert "$sealed" in "".join(d.decode() for d in h.blobs.objects.values())
    assert not [s for s in secrets if s in text]


def test_an_offloaded_input_and_output_hold_their_sensitive_fields_sealed() -> None:
    seen: list[tuple[str, str]] = []

    def charge(ctx: StepContext) -> dict[str, Any]:
        return {"token": TOKEN, "receipt": PAD, "card_seen": len(ctx.input["card"])}

    def ship(ctx: StepContext) -> dict[str, Any]:
        seen.append((ctx.input["card"], ctx.outputs["charge"]["token"]))
        return {"shipped": True}

    flow = Flow(
        "orders",
        (ActionStep("charge", charge), ActionStep("ship", ship)),
        input_model=Order,
        sensitive=("outputs.charge.token",),
    )
    h = harness(flow)
    record = h.run(h.start("orders", order(), flow_id="o-1"))
    assert record is not None and record.status is Status.SUCCEEDED, record.result
    stored = h.flow("o-1")
    assert refs(stored.input) and refs(stored.outputs["charge"])  # both went to the bucket
    assert_sealed_everywhere(h, CARD, TOKEN)
    assert seen == [(CARD, TOKEN)]  # ... and the handler read them in clear
    assert h.output("o-1", "charge")["token"] == TOKEN  # as the steps after it see it
    # What a reader is given (the api's ?resolve=true, a client without the key): sealed.
    resolved = h.value("o-1", stored.outputs["charge"])
    assert is_sealed(resolved["token"]) and resolved["receipt"] == PAD


def test_a_callbacks_offloaded_completion_is_sealed_and_its_result_opens_for_the_client() -> None:
    flow = Flow(
        "cards",
        (CallbackStep("issue", lambda ctx: {"sent": True}, timeout_s=600),),
        sensitive=("outputs.issue.pin",),
    )
    h = harness(flow)
    flow_id = h.start("cards", {}, flow_id="c-1")
    h.run_until(h.now)
    h.complete(h.token(flow_id, "issue"), {"pin": PIN, "pad": PAD})
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED, record.result
    assert refs(h.flow(flow_id).outputs["issue"]) and refs(record.result.data)  # type: ignore[union-attr]
    assert_sealed_everywhere(h, PIN)
    assert h.result_data(flow_id)["pin"] == PIN  # as a client holding the key reads it
    (event,) = h.results(flow_id)
    assert PIN not in json.dumps(event)


def test_a_child_gets_its_parents_offloaded_input_sealed_for_itself() -> None:
    seen: list[str] = []

    def pay(ctx: StepContext) -> dict[str, Any]:
        seen.append(ctx.input["card"])
        return {"token": TOKEN, "pad": PAD}

    child = Flow(
        "pay", (ActionStep("pay", pay),), input_model=Order, sensitive=("outputs.pay.token",)
    )
    parent = Flow(
        "checkout",
        (
            ChildFlow("payment", flow="pay"),
            ActionStep("ship", lambda ctx: {"token": ctx.outputs["payment"]["token"]}),
        ),
        input_model=Order,
        sensitive=("outputs.payment.token", "outputs.ship.token"),
    )
    h = harness(parent, child)
    record = h.run(h.start("checkout", order(), flow_id="co-1"))
    assert record is not None and record.status is Status.SUCCEEDED, record.result
    (child_record,) = [h.flow(k) for k in h.store.docs if h.flow(k).flow == "pay"]
    assert refs(child_record.input)  # the child's input, offloaded: sealed for the child
    assert seen == [CARD]
    assert h.output("co-1", "ship")["token"] == TOKEN  # the child's result, resealed
    assert_sealed_everywhere(h, CARD, TOKEN)


def test_a_foreachs_items_outputs_are_sealed_in_its_lanes_pages_and_join() -> None:
    tokens = [f"tok_item_{i:04d}" for i in range(100)]
    seen: list[list[str]] = []

    def tokenize(ctx: StepContext) -> dict[str, Any]:
        # Each under the threshold (kept in its lane, then paged), but the first: offloaded.
        return {"token": tokens[ctx.item], "pad": "p" * (4000 if ctx.item == 0 else 800)}

    def total(ctx: StepContext) -> dict[str, Any]:
        seen.append([item["token"] for item in ctx.outputs["each"]["items"]])
        return {}

    each = ForEach(
        "each",
        items=lambda ctx: list(range(100)),
        steps=(ActionStep("tokenize", tokenize),),
        concurrency=1,  # one lane: its items' outputs take more than a page
    )
    flow = Flow(
        "batch",
        (each, ActionStep("total", total)),
        sensitive=("outputs.each.items.*.token",),
    )
    h = harness(flow)
    record = h.run(h.start("batch", {}, flow_id="b-1"))
    assert record is not None and record.status is Status.SUCCEEDED, record.result
    (lane,) = [h.flow(k) for k in h.store.docs if h.flow(k).is_lane]
    assert lane.item_pages and PAGE_BYTES < 99 * 800  # it moved outputs into page objects
    assert refs(h.flow("b-1").outputs["each"])  # the join, offloaded
    assert seen == [tokens]
    assert_sealed_everywhere(h, *tokens)

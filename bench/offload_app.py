"""Flows whose values are far over a flow document's 1 MiB, for payload offload
(``relayflow.core.payloads``): bench/offload.py runs them on a local stack, and so do the
end-to-end tests (tests/e2e/test_offload.py, on the stack of bench/e2e_app.py).

- ``payload``: ``make`` returns ``mib`` MiB, ``check`` reads it back and hashes it, ``deliver``
  hands the same value on as the flow's result (the client reads it back).
- ``payload-wait``: ``make``, then a wait for the signal ``go``, then ``check``: a test deletes
  or changes the object while the flow waits.
- ``payload-fanout``: a ForEach of ``items`` items, each returning ``item_bytes`` bytes, then
  ``summarize`` checks every item's output in order.
- ``payload-sealed``: a sensitive ``card`` in an input large enough to be offloaded,
  ``tokenize`` returns a sensitive token and ``mib`` MiB (offloaded too), ``verify`` checks
  it read both in clear and returns them as the result (offloaded, the token sealed in it):
  the bucket must hold them sealed (sealing comes before offload).
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Any

from pydantic import BaseModel

from relayflow import (
    ActionStep,
    Flow,
    ForEach,
    PermanentError,
    Registry,
    Sensitive,
    StepContext,
)
from relayflow.core.flows import WaitForSignal

MIB = 1024 * 1024


def blob(mib: float, seed: str) -> str:
    """``mib`` MiB of text that depends on ``seed`` (a hash chain, so no two seeds agree)."""
    size = int(mib * MIB)
    block = hashlib.sha256(seed.encode()).hexdigest() * 64  # 4 KiB
    return (block * (size // len(block) + 1))[:size]


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def make(ctx: StepContext) -> dict[str, Any]:
    data = blob(float(ctx.input["mib"]), str(ctx.input.get("seed", ctx.flow_id)))
    return {"data": data, "sha256": digest(data), "length": len(data)}


def check(ctx: StepContext) -> dict[str, Any]:
    made = ctx.outputs["make"]
    if digest(made["data"]) != made["sha256"] or len(made["data"]) != made["length"]:
        raise PermanentError("the value read back is not the value written", code="MISMATCH")
    return {"sha256": made["sha256"], "length": made["length"]}


def deliver(ctx: StepContext) -> dict[str, Any]:
    return dict(ctx.outputs["make"])


def item(ctx: StepContext) -> dict[str, Any]:
    size = int(ctx.input["item_bytes"])
    return {"i": ctx.item, "pad": blob(size / MIB, f"item-{ctx.item}")}


def summarize(ctx: StepContext) -> dict[str, Any]:
    items = ctx.outputs["each"]["items"]
    size = int(ctx.input["item_bytes"])
    for i, out in enumerate(items):
        if out is None or out["i"] != i or out["pad"] != blob(size / MIB, f"item-{i}"):
            raise PermanentError(f"item {i}'s output read back wrong", code="MISMATCH")
    total = sum(len(out["pad"]) for out in items)
    return {"items": len(items), "bytes": total}


class SealedOrder(BaseModel):
    """A card to keep sealed, with notes that make the input too large for its document."""

    card: Annotated[str, Sensitive]
    notes: str
    mib: float


def token_of(card: str) -> str:
    return f"tok-{digest(card)[:16]}"


def tokenize(ctx: StepContext) -> dict[str, Any]:
    order = ctx.input_as(SealedOrder)
    return {"token": token_of(order.card), "data": blob(order.mib, ctx.flow_id)}


def verify(ctx: StepContext) -> dict[str, Any]:
    order = ctx.input_as(SealedOrder)
    made = ctx.outputs["tokenize"]
    if made["token"] != token_of(order.card):
        raise PermanentError("the token read back is not the token made", code="MISMATCH")
    return {"card_last4": order.card[-4:], "token": made["token"], "data": made["data"]}


FLOWS = (
    Flow(
        name="payload",
        steps=(
            ActionStep("make", make),
            ActionStep("check", check),
            ActionStep("deliver", deliver),
        ),
    ),
    Flow(
        name="payload-wait",
        steps=(ActionStep("make", make), WaitForSignal("wait", "go"), ActionStep("check", check)),
    ),
    Flow(
        name="payload-fanout",
        steps=(
            ForEach(
                "each",
                items=lambda ctx: list(range(int(ctx.input["items"]))),
                steps=(ActionStep("work", item),),
                # 20 lanes: 100 items of 15 KB fill a page in each lane, 10,000 of 5 KiB forty.
                concurrency=20,
            ),
            ActionStep("summarize", summarize),
        ),
    ),
    Flow(
        name="payload-sealed",
        steps=(ActionStep("tokenize", tokenize), ActionStep("verify", verify)),
        input_model=SealedOrder,
        sensitive=("outputs.tokenize.token", "outputs.verify.token"),
    ),
)

registry = Registry(FLOWS)

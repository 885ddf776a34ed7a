"""The app tests/e2e/test_children.py and bench/fanout.py --children run: an order whose
``charge`` step is a child flow (``payment``, which fails when its input says so), and a
batch whose ForEach starts one ``payment`` child per item."""

from __future__ import annotations

from relayflow import ActionStep, ChildFlow, Flow, ForEach, PermanentError, Registry, StepContext


def reserve(ctx: StepContext) -> dict[str, object]:
    return {"reserved": True}


def capture(ctx: StepContext) -> dict[str, object]:
    if ctx.input.get("fail"):
        raise PermanentError("card declined", code="DECLINED")
    return {"captured": ctx.input.get("amount", 0)}


def ship(ctx: StepContext) -> dict[str, object]:
    return {"shipped": True, "paid": ctx.outputs["charge"]["captured"]}


registry = Registry(
    [
        Flow(name="payment", steps=(ActionStep("capture", capture),)),
        Flow(
            name="order",
            steps=(
                ActionStep("reserve", reserve),
                ChildFlow(
                    "charge",
                    flow="payment",
                    input=lambda ctx: {
                        "amount": ctx.input["amount"],
                        "fail": bool(ctx.input.get("fail")),
                    },
                ),
                ActionStep("ship", ship),
            ),
        ),
        Flow(
            name="batch",
            steps=(
                ForEach(
                    "each",
                    items=lambda ctx: list(range(int(ctx.input["items"]))),
                    steps=(
                        ChildFlow("pay", flow="payment", input=lambda ctx: {"amount": ctx.item}),
                    ),
                    concurrency=50,
                ),
            ),
        ),
    ]
)

"""The app bench/fanout.py runs: one flow, a ForEach of N items, each a single action that
only computes, so the figures are relayflow's own (tasks, writes, contention), not an API's."""

from __future__ import annotations

from relayflow import ActionStep, Flow, ForEach, Registry, StepContext


def double(ctx: StepContext) -> dict[str, int]:
    return {"value": int(ctx.item) * 2}


def summarize(ctx: StepContext) -> dict[str, int]:
    return {"items": len(ctx.outputs["each"]["items"])}


registry = Registry(
    [
        Flow(
            name="fanout",
            steps=(
                ForEach(
                    "each",
                    items=lambda ctx: list(range(int(ctx.input["items"]))),
                    steps=(ActionStep("double", double),),
                    concurrency=50,
                ),
                ActionStep("summarize", summarize),
            ),
        )
    ]
)

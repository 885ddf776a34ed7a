"""The app bench/capacity.py runs: the reference app's flows (the registration flow, and the
fleet flow: a ForEach of callback steps) and two shapes that only compute, so their figures are
relayflow's own: a parallel DAG (one step, three branches after it, a join) and a ForEach of
actions."""

from __future__ import annotations

from typing import Any

from relayflow import ActionStep, Flow, ForEach, Registry, StepContext
from relayflow.apps.registration import build_registry as reference_registry
from relayflow.settings import Settings

DAG_FLOW = "capacity_dag"
FOREACH_FLOW = "capacity_each"


def compute(ctx: StepContext) -> dict[str, Any]:
    return {"step": ctx.step, "input": len(ctx.input)}


def double(ctx: StepContext) -> dict[str, int]:
    return {"value": int(ctx.item) * 2}


def count(ctx: StepContext) -> dict[str, int]:
    return {"items": len(ctx.outputs["each"]["items"])}


def dag_flow() -> Flow:
    """start, then a, b and c in parallel, then join once all three are done."""
    return Flow(
        name=DAG_FLOW,
        steps=(
            ActionStep("start", compute),
            ActionStep("a", compute, after=("start",)),
            ActionStep("b", compute, after=("start",)),
            ActionStep("c", compute, after=("start",)),
            ActionStep("join", compute, after=("a", "b", "c")),
        ),
    )


def foreach_flow() -> Flow:
    """A ForEach of the input's items (five at a time), each one action; then a count."""
    return Flow(
        name=FOREACH_FLOW,
        steps=(
            ForEach(
                "each",
                items=lambda ctx: list(range(int(ctx.input["items"]))),
                steps=(ActionStep("double", double),),
                concurrency=5,
            ),
            ActionStep("count", count),
        ),
    )


def build_registry(settings: Settings) -> Registry:
    registry = reference_registry(settings)
    registry.register(dag_flow())
    registry.register(foreach_flow())
    return registry

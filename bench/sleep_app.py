"""The app bench/sleepers.py and tests/e2e/test_sleep.py run: one flow that sleeps for as long
as its input says, then does one action that only computes."""

from __future__ import annotations

from datetime import datetime, timedelta

from relayflow import ActionStep, Flow, Registry, Sleep, StepContext


def wake_at(ctx: StepContext) -> datetime:
    """``input.seconds`` from when the sleep's wake time is fixed (its first task)."""
    return ctx.clock() + timedelta(seconds=float(ctx.input["seconds"]))


def woke(ctx: StepContext) -> dict[str, str]:
    return {"slept_until": str(ctx.outputs["nap"]["slept_until"])}


registry = Registry(
    [Flow(name="sleeper", steps=(Sleep("nap", until=wake_at), ActionStep("woke", woke)))]
)

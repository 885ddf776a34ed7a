"""The app tests/e2e/test_schedules.py runs: one quick flow, started by an hourly schedule."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from relayflow import ActionStep, Flow, Registry, Schedule, StepContext


def echo(ctx: StepContext) -> dict[str, Any]:
    return {"tick": ctx.input["tick"]}


def at_tick(tick: datetime) -> dict[str, Any]:
    return {"tick": tick.isoformat()}


registry = Registry(
    [Flow(name="hourly-echo", steps=(ActionStep("echo", echo),))],
    schedules=[Schedule("e2e-hourly", flow="hourly-echo", cron="0 * * * *", input=at_tick)],
)

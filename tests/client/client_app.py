"""The app tests/client runs: one flow for each way a flow ends, all of them quick.

- ``echo`` succeeds with ``{"x": x}`` (its input model: ``x`` an int);
- ``fails`` fails for good (a PermanentError, code ``NOPE``);
- ``expires`` waits for a callback that never comes and times out after 1.5 s;
- ``waits`` waits for a callback for 10 minutes: cancelled, completed or timed out by tests;
- ``doubled`` succeeds with ``{"twice": 2x}``, a ``Doubled`` (its output model);
- ``mistyped`` says it outputs a ``Doubled`` but returns something else: it fails
  (``OUTPUT_INVALID``);
- ``decides`` waits up to 10 minutes for an ``approve`` or ``reject`` signal and succeeds with
  what the signal said.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from relayflow import (
    ActionStep,
    CallbackStep,
    Flow,
    PermanentError,
    Registry,
    StepContext,
    WaitForSignal,
)


class Echo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    x: int


def echo(ctx: StepContext) -> dict[str, Any]:
    return {"x": ctx.input["x"]}


class Doubled(BaseModel):
    twice: int


def double(ctx: StepContext) -> dict[str, Any]:
    return {"twice": 2 * ctx.input_as(Echo).x}


def mistype(ctx: StepContext) -> dict[str, Any]:
    return {"twice": "many"}


def refuse(ctx: StepContext) -> dict[str, Any]:
    raise PermanentError("this flow always fails", code="NOPE")


def decided(ctx: StepContext) -> dict[str, Any]:
    decision = ctx.outputs["decision"]
    return {"signal": decision["signal"], "data": decision["data"], "by": decision["by"]}


def hand_out(ctx: StepContext) -> dict[str, Any]:
    return {"sent": True}


registry = Registry(
    [
        Flow(name="echo", steps=(ActionStep("echo", echo),), input_model=Echo),
        Flow(name="fails", steps=(ActionStep("refuse", refuse),)),
        Flow(name="expires", steps=(CallbackStep("never", hand_out, timeout_s=1.5),)),
        Flow(name="waits", steps=(CallbackStep("approval", hand_out, timeout_s=600),)),
        Flow("doubled", (ActionStep("double", double),), input_model=Echo, output_model=Doubled),
        Flow("mistyped", (ActionStep("mistype", mistype),), output_model=Doubled),
        Flow(
            "decides",
            (
                WaitForSignal("decision", signal=("approve", "reject"), timeout_s=600),
                ActionStep("record", decided),
            ),
        ),
    ]
)

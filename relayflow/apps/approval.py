"""The reference app's approval flow: an order waits for a person to approve or reject it.

    request    (action: records what is asked; no external call)
    decision   (WaitForSignal "approve" or "reject", from the api, the CLI, flow-signals or
                the console's buttons; timed out after ``timeout_s``)
    record     (action: the outcome, and who decided and why)

Written only against relayflow's public API, as any team's app would be.
"""

from __future__ import annotations

from typing import Any

from relayflow import ActionStep, Flow, StepContext, WaitForSignal

FLOW_NAME = "approval"
DECISION_TIMEOUT_S = 24 * 3600.0


def request(ctx: StepContext) -> dict[str, Any]:
    return {"asked": dict(ctx.input)}


def record(ctx: StepContext) -> dict[str, Any]:
    decision = ctx.outputs["decision"]
    return {
        "approved": decision["signal"] == "approve",
        "by": decision["by"],
        "reason": decision["reason"],
    }


def approval_flow(timeout_s: float = DECISION_TIMEOUT_S) -> Flow:
    return Flow(
        name=FLOW_NAME,
        steps=(
            ActionStep("request", request),
            WaitForSignal("decision", signal=("approve", "reject"), timeout_s=timeout_s),
            ActionStep("record", record),
        ),
    )

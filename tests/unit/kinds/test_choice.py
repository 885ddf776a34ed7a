"""relayflow.core.kinds.choice: an If step's condition, with no side effect, picks the branch
that runs; the branch not picked is skipped, with every step only it leads to.

The flow here: ``big`` (if amount > 1000: ``review`` then ``approve``; otherwise ``auto``) ->
``settle`` (after either).
"""

from __future__ import annotations

from typing import Any

import pytest

from relayflow.core import planner
from relayflow.core.errors import PermanentError, RetryableError
from relayflow.core.flows import ActionStep, Flow, IfStep, StepContext
from relayflow.core.kinds import REGISTRY, Choice
from relayflow.core.kinds.choice import choose
from relayflow.core.planner import Completed, Plan, Retry
from relayflow.core.position import TaskKind
from relayflow.core.records import FlowRecord
from tests.unit.planner.sample import NOW, QUEUES, noop

KIND = Choice()
BIG = IfStep(
    "big", lambda ctx: ctx.input["amount"] > 1000, then=("review", "approve"), otherwise=("auto",)
)
PAYOUT = Flow(
    name="payout",
    steps=(
        BIG,
        ActionStep("review", noop),
        ActionStep("approve", noop, after=("review",)),
        ActionStep("auto", noop, after=("big",)),
        ActionStep("settle", noop, after=("approve", "auto")),
    ),
)
PLAN = Plan(definition=PAYOUT, queues=QUEUES, now=NOW, kinds=REGISTRY)


def context(amount: Any) -> StepContext:
    return StepContext(
        flow_id="p-1", flow="payout", step="big", input={"amount": amount}, outputs={},
        idempotency_key="k",
    )  # fmt: skip


def started() -> FlowRecord:
    record = planner.new_record(PLAN, flow_id="p-1", input={}, message_id=None, deadline_s=None)
    return record.focused("big")


@pytest.mark.parametrize(("amount", "branch"), [(5000, "then"), (50, "otherwise")])
def test_the_condition_picks_the_branch(amount: int, branch: str) -> None:
    assert choose(BIG, context(amount)) == {"branch": branch}
    handler = KIND.handler(BIG, TaskKind.CHOICE)
    assert handler is not None and handler(context(amount)) == {"branch": branch}


def says_yes(ctx: StepContext) -> Any:
    return "yes"


def test_a_condition_that_is_not_a_bool_fails_the_step_for_good() -> None:
    truthy = IfStep("big", says_yes, then=(), otherwise=())
    says = "the condition of 'big' returned a str, not a bool"
    with pytest.raises(PermanentError, match=says) as raised:
        choose(truthy, context(1))
    assert raised.value.code == "INVALID_OUTPUT"


def test_the_branch_not_picked_is_skipped_and_the_picked_one_starts() -> None:
    chose = planner.after(PLAN, started(), Completed({"branch": "then"}))
    assert chose.skipped == ["auto"]
    assert list(chose.tracks) == ["review"]
    assert chose.history[-1].outcome == "chose then"
    other = planner.after(PLAN, started(), Completed({"branch": "otherwise"}))
    assert sorted(other.skipped) == ["approve", "review"]
    assert list(other.tracks) == ["auto"]


def test_a_condition_that_raised_fails_the_flow_instead_of_retrying_unbounded() -> None:
    # A condition reads only the input and outputs: a retry would raise again, and an If has
    # no retry policy to bound one (this raised AssertionError on every delivery before).
    planned = planner.after(PLAN, started(), Retry(RetryableError("lookup down", code="DOWN")))
    assert planned.history[-1].step == "big"
    assert planned.result is not None and planned.result.code == "CONDITION_FAILED"
    assert "lookup down" in (planned.result.message or "")


def test_it_is_described_by_its_branches() -> None:
    assert KIND.describe(BIG) == "if: then review, approve; otherwise auto"
    lone = IfStep("maybe", lambda ctx: True, then=("x",), otherwise=())
    assert KIND.describe(lone) == "if: then x; otherwise -"


def test_it_claims_nothing_and_waits_on_nothing() -> None:
    assert not KIND.claims(TaskKind.CHOICE) and not KIND.waits(TaskKind.CHOICE)
    assert not KIND.makes_effects and KIND.retry(BIG) is None

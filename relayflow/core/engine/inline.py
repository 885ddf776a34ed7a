"""Continuing inline: the claimed step that a commit leads to, run in the same request.

A task's request that has used under a quarter of its time budget runs the next step itself
when that step is due at once (its claim taken in the same commit), instead of enqueueing a task
that a new request would pick up a moment later (``Limits.continue_inline``). Here: the request
being served, and what a commit takes over for the step to run next.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from datetime import datetime

from relayflow.core import planner
from relayflow.core.breakers import Verdict
from relayflow.core.planner import Plan
from relayflow.core.records import FlowRecord
from relayflow.core.state import ACTIVE

# A step due at once after the one a request ran is run in that request while the request
# has used less than this share of its time budget.
CONTINUE_WITHIN = 0.25


@dataclass(frozen=True)
class Request:
    """The task request being served: when it began, the budget of its queue, whether Cloud
    Tasks says it retries a failed dispatch (X-CloudTasks-TaskRetryCount above 0), and whether
    that dispatch got an answer that says it is over (not a timeout: it may still run)."""

    began: datetime
    budget_s: float
    redelivery: bool = True
    answered: bool = False


REQUEST: contextvars.ContextVar[Request | None] = contextvars.ContextVar(
    "relayflow_request", default=None
)


def first_dispatch() -> bool:
    """Whether the request being served is known to be a task's first dispatch (or a
    duplicate of it), not a retry: only such a delivery may run under a first claim."""
    request = REQUEST.get()
    return request is not None and not request.redelivery


def retries_an_ended_dispatch() -> bool:
    """Whether the request being served retries a dispatch known to be over (it was
    answered): a first claim that dispatch may have run under need not be waited out."""
    request = REQUEST.get()
    return request is not None and request.redelivery and request.answered


@dataclass(frozen=True)
class Onward:
    """A step to run in this request after the commit: claimed for ``holder``, or (holder
    None) put off as its breaker's ``verdict`` says, in the same commit."""

    holder: str | None
    verdict: Verdict | None
    budget_s: float

    def apply(self, plan: Plan, planned: FlowRecord, *, lease_s: float) -> FlowRecord:
        if not runs_now(plan, planned):
            return planned
        if self.holder is None:
            verdict = self.verdict
            assert verdict is not None and verdict.until is not None
            return planner.defer(
                plan,
                planned,
                until=verdict.until,
                why=verdict.detail,
                dependency=verdict.dependency,
            )
        claimed = planner.claim(plan, planned, lease_s=lease_s, holder=self.holder)
        return planned if planner.exhausted(plan, claimed) else claimed


def runs_now(plan: Plan, record: FlowRecord) -> bool:
    """Whether ``record``, one admitted track, is at a claimed step whose task is due now."""
    nxt = record.next
    return (
        record.status in ACTIVE
        and not record.is_lane
        and len(record.tracks) == 1
        and record.admission == "admitted"
        and plan.kinds.claims(record.position.kind)
        # ... with a handler of the flow's (a child step's undo is the engine's own task)
        and not plan.kinds.at(plan.flow, record.position).runs_itself(record.position.kind)
        and nxt is not None
        and nxt.position == record.position
        and nxt.run_at <= plan.now
    )

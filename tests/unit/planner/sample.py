"""The flow the planner's and the kinds' transition tests plan: ``reserve`` (action,
compensated) -> ``await_ready`` (poll) -> ``finish`` (action). Time is a fixed ``NOW`` that
each test moves explicitly.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from relayflow.core import planner
from relayflow.core.backoff import Jitter
from relayflow.core.errors import NotReady
from relayflow.core.flows import ActionStep, Flow, PollPolicy, PollStep, RetryPolicy, StepContext
from relayflow.core.kinds import REGISTRY
from relayflow.core.planner import Completed, Plan, QueueNames, Waiting
from relayflow.core.records import FlowRecord

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
FLOW_ID = "acme-1"
QUEUES = QueueNames(steps="q-steps", polls="q-polls")
POLL_KEY = f"{FLOW_ID}:await_ready"
RETRY = RetryPolicy(max_attempts=3, initial_s=1.0, multiplier=2.0, max_interval_s=10.0, jitter=0)
POLL = PollPolicy(initial_s=1.0, multiplier=2.0, max_interval_s=30.0, max_polls=50, deadline_s=900)
NO_JITTER = PollPolicy(
    initial_s=1.0, multiplier=2.0, max_interval_s=30.0, jitter_mode=Jitter.NONE, deadline_s=900
)


def noop(ctx: StepContext) -> dict[str, Any]:
    return {}


def make_flow(*, poll: PollPolicy = POLL, compensate: bool = True) -> Flow:
    return Flow(
        name="demo",
        steps=(
            ActionStep("reserve", noop, retry=RETRY, compensate=noop if compensate else None),
            PollStep("await_ready", noop, policy=poll),
            ActionStep("finish", noop, retry=RETRY),
        ),
    )


FLOW = make_flow()


def plan(at: datetime = NOW, *, flow: Flow = FLOW, history_limit: int = 200) -> Plan:
    return Plan(definition=flow, queues=QUEUES, now=at, kinds=REGISTRY, history_limit=history_limit)


def started(*, flow: Flow = FLOW, deadline_s: float | None = None, **kw: Any) -> FlowRecord:
    return planner.new_record(
        plan(flow=flow, **kw), flow_id=FLOW_ID, input={"resource": "acme-1"}, message_id="m-1",
        deadline_s=deadline_s,
    )  # fmt: skip


def at_poll(*, flow: Flow = FLOW, deadline_s: float | None = None) -> FlowRecord:
    """The flow after ``reserve`` succeeded at NOW: polling ``await_ready`` from NOW."""
    record = started(flow=flow, deadline_s=deadline_s)
    return planner.after(plan(flow=flow), record, Completed({"reservation": "r-1"}))


def at_finish(*, flow: Flow = FLOW) -> FlowRecord:
    """The flow after ``await_ready`` became ready at NOW: about to run ``finish``."""
    return planner.after(plan(flow=flow), at_poll(flow=flow), Completed({"state": "READY"}))


def not_ready(detail: str = "still pending", delay_s: float | None = None) -> Waiting:
    return Waiting(NotReady(detail, delay_s=delay_s))

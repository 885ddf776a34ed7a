"""relayflow.core.engine.kernel: what every part of the engine shares — a plan made now, the
definition a flow is planned with, a handler's time budget, reading a flow (an unreadable one
ended), writing a change, and settling what must follow a commit (its next task, its result
event), safely more than once (invariant 5)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from relayflow.core import planner
from relayflow.core.breaker_policy import Dependencies
from relayflow.core.breakers import Breakers
from relayflow.core.clock import FakeClock
from relayflow.core.engine.kernel import Limits
from relayflow.core.engine.outcomes import Ran
from relayflow.core.errors import UnknownFlow
from relayflow.core.flows import ActionStep, Flow, ForEach, PollStep, StepContext
from relayflow.core.planner import Completed
from relayflow.core.ports import Snapshot
from relayflow.core.position import TaskKind
from relayflow.core.records import FlowRecord
from relayflow.core.state import Status
from relayflow.testing.memory import MemoryBreakers

from ..fakes import FakeEvents, FakeQueue, FakeStore
from .support import NOW, kernel_over


def noop(ctx: StepContext) -> dict[str, Any]:
    return {}


def demo(version: int = 1) -> Flow:
    return Flow(
        name="demo",
        version=version,
        steps=(ActionStep("reserve", noop), PollStep("await_ready", noop)),
    )


class Ports:
    """A kernel over fakes a test can look into."""

    def __init__(self, *flows: Flow, limits: Limits | None = None) -> None:
        self.store, self.queue, self.events = FakeStore(), FakeQueue(), FakeEvents()
        self.clock = FakeClock(NOW)
        self.kernel = kernel_over(
            *(flows or (demo(),)),
            store=self.store,
            queue=self.queue,
            events=self.events,
            clock=self.clock,
            limits=limits,
        )

    def started(self, flow_id: str = "1001") -> Snapshot:
        """A new flow of ``demo``, created but not yet settled (its first task not made)."""
        flow = self.kernel.registry.get("demo")
        record = planner.new_record(
            self.kernel.plan(flow), flow_id=flow_id, input={}, message_id=None, deadline_s=None
        )
        assert self.store.create(record)
        found = self.store.read(flow_id)
        assert found is not None
        return found

    def ended(self) -> FlowRecord:
        """A flow of ``demo`` that ended SUCCEEDED (its result not yet published)."""
        found = self.started()
        plan = self.kernel.plan(self.kernel.registry.get("demo"))
        done = planner.after(plan, found.record, Completed({}))
        done = planner.after(plan, done, Completed({}))
        assert done.status is Status.SUCCEEDED
        assert self.store.change(found.record.key, lambda current: done) is not None
        stored = self.store.get(found.record.key)
        assert stored is not None
        return stored


def test_each_plan_is_made_now_with_the_limits_and_a_fresh_nonce() -> None:
    limits = Limits(history_limit=7, retention_s=60.0, undo_window_s=5.0, undo_initial_s=1.0)
    ports = Ports(limits=limits)
    first, second = (ports.kernel.plan(demo()) for _ in range(2))
    assert first.now == NOW and first.definition == demo()
    assert (first.history_limit, first.retention_s) == (7, 60.0)
    assert (first.undo_window_s, first.undo_initial_s) == (5.0, 1.0)
    assert len(first.nonce) == 32 and first.nonce != second.nonce  # tokens cannot be guessed
    assert first.p95_s is None  # no breakers: no latency to start adaptive retries from


def test_with_breakers_a_plan_knows_each_dependencys_p95() -> None:
    breakers = Breakers(MemoryBreakers(), Dependencies(), FakeClock(NOW), shards=1)
    kernel = kernel_over(demo(), breakers=breakers)
    p95 = kernel.plan(demo()).p95_s
    assert p95 is not None and p95("client-api") is None  # nothing measured yet


def test_a_flow_is_planned_with_its_own_version_or_the_newest_if_its_is_gone() -> None:
    ports = Ports(demo(version=2), demo(version=3))
    record = ports.started().record
    assert ports.kernel.definition(record) == (demo(version=3), "")
    old = record.model_copy(update={"version": 2})
    assert ports.kernel.definition(old) == (demo(version=2), "")
    gone = record.model_copy(update={"version": 1})
    assert ports.kernel.definition(gone) == (
        demo(version=3),
        "flow 'demo' has no version 1 any more (registered: 2, 3)",
    )
    with pytest.raises(UnknownFlow):
        ports.kernel.definition(record.model_copy(update={"flow": "undeployed"}))


def test_a_lane_is_planned_with_its_foreachs_item_steps() -> None:
    each = ForEach("each", items=lambda ctx: [1], steps=(ActionStep("charge", noop),))
    batch = Flow(name="batch", steps=(each,))
    kernel = kernel_over(batch)
    flow = planner.new_record(
        kernel.plan(batch), flow_id="b-1", input={}, message_id=None, deadline_s=None
    )
    assert kernel.planning_flow(flow) == batch
    lane = flow.model_copy(update={"flow_id": "b-1.each.0", "parent": "b-1", "scope": "each"})
    assert kernel.planning_flow(lane) == each.item_flow


def test_a_handler_of_a_task_that_waits_has_the_poll_queues_budget() -> None:
    kernel = kernel_over(limits=Limits(action_budget_s=90.0, poll_budget_s=40.0))
    assert [kernel.budget_s(t) for t in (TaskKind.ACTION, TaskKind.COMPENSATE)] == [90.0, 90.0]
    assert [kernel.budget_s(t) for t in (TaskKind.POLL, TaskKind.WAIT)] == [40.0, 40.0]


def test_a_flow_that_no_longer_parses_reads_as_none_and_is_ended() -> None:
    ports = Ports()
    ports.started()
    ports.store.docs["1001"]["status"] = "BOGUS"
    assert ports.kernel.read("1001") is None
    assert ports.store.docs["1001"]["result"]["code"] == "UNREADABLE"
    assert ports.kernel.read("nobody") is None


def test_a_write_settles_what_it_committed() -> None:
    ports = Ports()
    found = ports.started()
    plan = ports.kernel.plan(demo())
    ran = ports.kernel.write(found, lambda current: planner.after(plan, current, Completed({})))
    assert ran is Ran.ADVANCED
    record = ports.store.get("1001")
    assert record is not None and record.position.step == "await_ready"
    assert record.next is not None and ports.queue.exists(record.next)


def test_a_write_that_changes_nothing_is_stale_and_settles_the_flow_as_it_is() -> None:
    # given a flow whose first task was never made (its start died before settling)
    ports = Ports()
    found = ports.started()
    assert not ports.queue.tasks
    # when a write finds nothing to change, then it is stale, and the flow's task now exists
    assert ports.kernel.write(found, lambda current: None) is Ran.STALE
    assert found.record.next is not None and ports.queue.exists(found.record.next)


def test_what_runs_after_a_commit_may_answer_instead_of_settling_it() -> None:
    ports = Ports()
    found = ports.started()
    plan = ports.kernel.plan(demo())
    seen: list[str] = []

    def then(committed: Snapshot) -> Ran | None:
        seen.append(committed.record.position.step)
        return Ran.BUSY

    change = lambda current: planner.after(plan, current, Completed({}))  # noqa: E731
    assert ports.kernel.write(found, change, then=then) is Ran.BUSY
    assert seen == ["await_ready"]
    assert not ports.queue.tasks  # not settled: what ran next is this request's to finish


def test_what_runs_after_a_commit_and_answers_nothing_leaves_it_to_be_settled() -> None:
    ports = Ports()
    found = ports.started()
    plan = ports.kernel.plan(demo())
    change = lambda current: planner.after(plan, current, Completed({}))  # noqa: E731
    assert ports.kernel.write(found, change, then=lambda committed: None) is Ran.ADVANCED
    record = ports.store.get("1001")
    assert record is not None and record.next is not None and ports.queue.exists(record.next)


def test_a_write_the_store_refuses_for_good_ends_the_flow_commit_refused() -> None:
    ports = Ports()
    found = ports.started()
    ports.store.refuse = lambda doc: "too large" if doc["outputs"] else None
    plan = ports.kernel.plan(demo())
    done = lambda current: planner.after(plan, current, Completed({"blob": "x"}))  # noqa: E731
    assert ports.kernel.write(found, done) is Ran.ADVANCED
    record = ports.store.get("1001")
    assert record is not None and record.status is Status.FAILED
    assert record.result is not None and record.result.code == "COMMIT_REFUSED"
    assert record.result.message == "the store refused the flow's next state: too large"
    assert [e["code"] for e in ports.events.published] == ["COMMIT_REFUSED"]


def test_settling_makes_the_next_task_exist_once_however_often_it_is_settled() -> None:
    ports = Ports()
    record = ports.started().record
    for _ in range(3):
        ports.kernel.settle(record)
    assert len(ports.queue.tasks) == 1
    assert [outcome for _, _, outcome in ports.queue.ensured][1:] == ["already enqueued"] * 2


def test_settling_an_ended_flow_publishes_its_result_once() -> None:
    ports = Ports()
    ports.kernel.settle(ports.ended())
    assert [e["status"] for e in ports.events.published] == ["SUCCEEDED"]
    stored = ports.store.get("1001")
    assert stored is not None and stored.result_published  # marked sent after publishing
    ports.kernel.settle(stored)  # a duplicate task, the sweeper: the mark is remembered
    assert len(ports.events.published) == 1


def test_a_result_marked_sent_by_its_commit_is_published_when_settled_as_marked() -> None:
    ports = Ports()
    ended = ports.ended().model_copy(update={"result_published": True})
    ports.kernel.settle(ended)
    assert ports.events.published == []  # marked, and not by this write: sent already
    ports.kernel.settle(ended, marked=True)
    assert [e["flow_id"] for e in ports.events.published] == ["1001"]


def test_a_settled_flow_a_while_later_still_has_only_its_one_task() -> None:
    ports = Ports()
    record = ports.started().record
    ports.kernel.settle(record)
    ports.clock.advance(timedelta(hours=1).total_seconds())
    ports.kernel.settle(record)
    assert len(ports.queue.tasks) == 1

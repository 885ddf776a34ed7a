"""relayflow.core.engine.protection: a step whose dependency's breaker says not now is put off
(no try spent, remembered), a flow whose dependency stays down past its deadline times out and
is undone, and when the breaker closes what was put off for it comes back at once. Through
relayflow.testing's harness on a virtual clock; the breaker itself is
``tests/unit/test_breakers.py``'s, whose dependency, policy and flaky API these share."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from relayflow.core.breaker_policy import BreakerPolicy, Dependencies
from relayflow.core.breaker_state import Breaker
from relayflow.core.breakers import Breakers
from relayflow.core.errors import RetryableError
from relayflow.core.flows import Flow, PollPolicy, PollStep, StepContext
from relayflow.core.state import Status
from relayflow.testing import Harness
from tests.unit.test_breakers import DEP, POLICY, call, harness_with, open_from_elsewhere


def test_a_step_put_off_by_an_open_breaker_spends_no_attempt_and_succeeds_later() -> None:
    h, api = harness_with(api_down_s=120, attempts=3)
    flows = [h.start("sync", {}) for _ in range(6)]
    for flow_id in flows:
        h.run(flow_id)
    # Without the breaker, each flow would have spent its 3 attempts within ~5 s and failed.
    assert {h.flow(f).status for f in flows} == {Status.SUCCEEDED}
    deferred = [e for f in flows for e in h.flow(f).history if e.outcome == "deferred"]
    assert deferred, "no step was put off"
    assert all(h.flow(f).position.attempt <= 2 for f in flows)
    assert api.calls < 6 * 3  # fewer calls than 6 flows retrying on their own


def test_deferrals_are_recorded_with_why_and_under_new_task_names() -> None:
    h, _ = harness_with(api_down_s=60)
    open_from_elsewhere(h)
    flow_id = h.start("sync", {})
    # reserve; push, due at once, asks its breaker in the same request and is put off in
    # reserve's commit (a deployment runs steps due at once inline)
    h.deliver_next(flow_id)
    entry = h.flow(flow_id).history[-1]
    assert entry.outcome == "deferred"
    assert entry.detail and entry.detail.startswith("client-api's breaker is ")
    record = h.flow(flow_id)
    assert (record.position.attempt, record.position.deferral) == (0, 1)
    assert record.next is not None and record.next.task_id.endswith("d1")


def test_a_flow_whose_dependency_stays_down_past_its_deadline_times_out_and_is_undone() -> None:
    h, _ = harness_with(api_down_s=10_000)
    open_from_elsewhere(h)
    flow_id = h.start("sync", {}, deadline_s=60)
    record = h.run(flow_id)
    assert record.status is Status.TIMED_OUT
    assert record.result is not None and record.result.code == "DEADLINE_EXCEEDED"
    assert record.result.message.startswith("the deadline passes while client-api's ")
    assert record.position.attempt < 4  # put off, not retried to exhaustion
    assert [c.step for c in h.calls if c.context.flow_id == flow_id and c.kind == "compensate"] == [
        "reserve"
    ]


def watchers(h: Harness, down_s: float, **every_s: float) -> None:
    """Deploy one flow per name, each polling the dependency every so many seconds (no
    jitter) until it answers: it is down for ``down_s`` from now."""
    down_until = h.now + timedelta(seconds=down_s)

    def check(ctx: StepContext) -> dict[str, Any]:
        if h.now < down_until:
            raise RetryableError("connection refused", code="UNAVAILABLE")
        return {"active": True}

    def watcher(name: str, every: float) -> Flow:
        poll = PollPolicy(initial_s=every, max_interval_s=every, jitter=0)
        return Flow(
            name=name, steps=(PollStep("until_active", check, policy=poll, dependency=DEP),)
        )

    h.deploy([watcher(name, every) for name, every in every_s.items()])


def test_when_the_breaker_closes_the_steps_put_off_for_it_come_back_at_once() -> None:
    h = Harness([], dependencies=Dependencies(dependencies={DEP: POLICY}))
    down_until = h.now + timedelta(seconds=15)
    watchers(h, 15, slow=120, quick=1)
    open_from_elsewhere(h)  # open until 10 s
    slow = [h.start("slow", {}) for _ in range(5)]
    for _ in range(2):
        h.start("quick", {})  # these poll every second: they probe
    h.run()
    # The slow ones were put off for their next poll, 120 s away; the quick ones probed, and
    # closed the breaker once the dependency was back: the slow ones came back then.
    closed_at = h.breaker(DEP).transitions[-1].at
    assert h.breaker(DEP).state is Breaker.CLOSED and closed_at > down_until
    for flow_id in slow:
        record = h.flow(flow_id)
        assert record.status is Status.SUCCEEDED and record.finished_at is not None
        assert any(e.outcome == "deferred" for e in record.history)
        assert record.finished_at - closed_at < timedelta(seconds=2)  # not 120 s later


def test_a_queue_that_fails_to_bring_forward_is_not_asked_again_for_each_task() -> None:
    h = Harness([], dependencies=Dependencies(dependencies={DEP: POLICY}))
    watchers(h, 15, slow=120, quick=1)
    open_from_elsewhere(h)
    slow = [h.start("slow", {}) for _ in range(60)]
    for flow_id in slow:
        h.deliver_next(flow_id)  # put off for their next poll
    asked = []

    def down(task: Any) -> bool:
        asked.append(task)
        raise ConnectionError("Cloud Tasks unavailable")  # each call would wait its timeout

    h.queue.run_now = down  # type: ignore[method-assign]
    for _ in range(2):
        h.start("quick", {})  # they probe and close the breaker once the dependency is back
    h.run()
    assert h.breaker(DEP).state is Breaker.CLOSED
    assert 1 <= len(asked) <= 16  # at most those already in flight when the first failed
    # the rest came back on their own, at their next poll
    assert {h.flow(f).status for f in slow} == {Status.SUCCEEDED}


def test_steps_put_off_since_the_breaker_last_opened_come_back_when_it_closes() -> None:
    # Open for 2 s, doubling: probes fail at 2 and 6 s (the dependency is down until 10 s),
    # so the breaker last opens at 6 s and probes again at 14 s. A step put off in between
    # may have found the dependency back; it must not wait out its next poll as well.
    policy = BreakerPolicy(**{**POLICY.model_dump(), "open_s": 2, "max_open_s": 20})
    h = Harness([], dependencies=Dependencies(dependencies={DEP: policy}))
    began = h.now
    watchers(h, 10, medium=8, quick=1)
    open_from_elsewhere(h)
    for _ in range(2):
        h.start("quick", {})  # these poll every second: they probe
    h.run_until(began + timedelta(seconds=12))
    assert h.breaker(DEP).state is Breaker.OPEN  # the dependency is back; the breaker not yet
    medium = [h.start("medium", {}) for _ in range(3)]
    due = {}
    for flow_id in medium:
        h.deliver_next(flow_id)  # its first poll, put off
        nxt = h.flow(flow_id).next
        assert nxt is not None and nxt.position.deferral == 1
        due[flow_id] = nxt.run_at
    h.run()
    closed_at = h.breaker(DEP).transitions[-1].at
    assert h.breaker(DEP).state is Breaker.CLOSED
    for flow_id in medium:
        record = h.flow(flow_id)
        assert record.status is Status.SUCCEEDED and record.finished_at is not None
        assert due[flow_id] - closed_at > timedelta(seconds=2)  # left alone, it would wait
        assert record.finished_at - closed_at < timedelta(seconds=1)


def test_a_breaker_another_instance_closes_brings_this_instances_put_off_steps_forward() -> None:
    h = Harness([], dependencies=Dependencies(dependencies={DEP: POLICY}))
    watchers(h, 5, slow=120, quick=1)
    open_from_elsewhere(h)  # open until 10 s
    slow = [h.start("slow", {}) for _ in range(3)]
    for flow_id in slow:
        h.deliver_next(flow_id)  # put off by this instance, until its next try (30 s at most)
        nxt = h.flow(flow_id).next
        assert nxt is not None and nxt.position.deferral == 1
        assert nxt.run_at - h.now > timedelta(seconds=20)
    other = Breakers(h.breakers, h.dependencies, h.clock, shards=1)
    h.advance(10.5)
    for _ in range(POLICY.probes):  # the other instance probes, one after the other, and closes
        call(other, ok=True)
    assert h.breaker(DEP).state is Breaker.CLOSED
    closed_at = h.now
    h.advance(1.0)  # this instance looks at the breaker again on its next call to it
    h.run(h.start("quick", {}))
    h.run()
    for flow_id in slow:
        record = h.flow(flow_id)
        assert record.status is Status.SUCCEEDED and record.finished_at is not None
        assert record.finished_at - closed_at < timedelta(seconds=2)  # not at 30 s


def test_a_step_put_off_in_the_previous_steps_commit_is_brought_forward_too() -> None:
    h, _ = harness_with(api_down_s=0)
    open_from_elsewhere(h)  # open until 10 s; put-off steps spread over the next 10
    flows = [h.start("sync", {}, flow_id=f"inline-{i}") for i in range(6)]
    due = {}
    for flow_id in flows:
        h.deliver_next(flow_id)  # reserve; push, due at once, put off in reserve's commit
        nxt = h.flow(flow_id).next
        assert nxt is not None and nxt.position.step == "push" and nxt.position.deferral == 1
        due[flow_id] = nxt.run_at
    other = Breakers(h.breakers, h.dependencies, h.clock, shards=1)
    h.advance(10.5)
    for _ in range(POLICY.probes):
        call(other, ok=True)  # another instance closes it
    closed_at = h.now
    h.advance(1.0)
    h.run(h.start("sync", {}, flow_id="after"))  # its push reads the breaker: closed
    later = [f for f in flows if due[f] - closed_at > timedelta(seconds=3)]
    assert later, "every push was due soon anyway: the test shows nothing"
    for flow_id in later:
        pushed = [
            e for e in h.flow(flow_id).history if e.step == "push" and e.outcome != "deferred"
        ]
        assert pushed and pushed[0].at - closed_at < timedelta(seconds=2)


# -- which flows a dependency holds up or failed (FlowRecord.dependency, list --dependency) -----


def test_a_flow_put_off_for_a_dependency_names_it_until_the_step_is_done() -> None:
    h, _ = harness_with(api_down_s=60)
    open_from_elsewhere(h)
    flow_id = h.start("sync", {})
    assert h.flow(flow_id).dependency is None
    h.deliver_next(flow_id)  # push is put off for client-api's breaker
    assert h.flow(flow_id).dependency == DEP
    record = h.run(flow_id)
    assert record.status is Status.SUCCEEDED
    assert record.dependency is None  # done: nothing holds it up any more


def test_a_flow_that_fails_at_a_step_names_the_dependency_it_calls() -> None:
    h, _ = harness_with(api_down_s=10_000)
    open_from_elsewhere(h)
    flow_id = h.start("sync", {}, deadline_s=60)
    record = h.run(flow_id)
    assert record.status is Status.TIMED_OUT
    assert record.dependency == DEP  # through its compensation to its end
    assert h.retry(flow_id).dependency is None  # a new run starts held up by nothing


def test_a_flow_whose_retries_run_out_names_the_dependency_of_the_failing_step() -> None:
    h, _ = harness_with(api_down_s=10_000, attempts=1)
    record = h.run(h.start("sync", {}))
    assert (record.status, record.result and record.result.code) == (
        Status.FAILED,
        "RETRIES_EXHAUSTED",
    )
    assert record.dependency == DEP


def test_a_flow_reset_to_a_step_starts_held_up_by_nothing() -> None:
    h, _ = harness_with(api_down_s=10_000, attempts=1)
    flow_id = h.start("sync", {})
    assert h.run(flow_id).dependency == DEP
    assert h.reset(flow_id, "push", reason="api back").dependency is None


def test_a_tenants_resume_leaves_put_off_what_an_open_breaker_holds_up() -> None:
    # given a tenant's flow put off by its dependency's open breaker, and the tenant paused
    h, _ = harness_with(api_down_s=60)
    open_from_elsewhere(h)
    flow_id = h.start("sync", {}, tenant="acme")
    h.deliver_next(flow_id)  # put off by the breaker
    assert h.flow(flow_id).dependency == DEP
    h.engine.pause_tenant("acme", by="ops", reason="maintenance")

    # when the tenant is resumed while the breaker is still open, then the flow's task is not
    # brought forward: it comes when the breaker closes
    resumed = h.engine.resume_tenant("acme", by="ops", reason="done")
    assert resumed.brought_forward == 0
    assert h.breaker(DEP).state is Breaker.OPEN

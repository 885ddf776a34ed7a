"""Every failure is bounded (issue 7, DESIGN invariants 11 and 12): no step retries for ever, no
commit is retried when it can never land, no flow of a type that is gone is stranded, a claim
has an owner, the saga undoes every effect that may be live, and polls are bounded by time.

Each test plays the failure through relayflow.testing's harness: the real planner and engine,
in memory, with a virtual clock (a crash is a Crash raised from the handler)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from relayflow import (
    ActionStep,
    CallbackStep,
    Flow,
    PermanentError,
    PollPolicy,
    PollStep,
    RetryableError,
    RetryPolicy,
    StepContext,
)
from relayflow.core.engine import Limits, Ran
from relayflow.core.records import EffectState
from relayflow.core.state import Status
from relayflow.testing import Crash, Harness, scripted

FAST = RetryPolicy(max_attempts=3, initial_s=1.0, max_interval_s=5.0, jitter=0.0)
POLL = PollPolicy(initial_s=5.0, multiplier=1.0, max_interval_s=5.0, jitter=0.0, deadline_s=120)


class Api:
    """A fake external API that honours idempotency keys and counts what is live."""

    def __init__(self) -> None:
        self.made: dict[str, str] = {}  # key -> effect id
        self.live: set[str] = set()

    def create(self, key: str) -> str:
        if key not in self.made:
            self.made[key] = f"eff-{len(self.made) + 1}"
            self.live.add(self.made[key])
        return self.made[key]

    def delete(self, effect_id: str) -> None:
        self.live.discard(effect_id)  # already gone is fine


def saga(api: Api, *, retry: RetryPolicy = FAST, fail_last: bool = False) -> Flow:
    """reserve (undone by release) -> wait (poll) -> charge (undone by refund) -> finish."""

    def make(step: str) -> Any:
        def run(ctx: StepContext) -> dict[str, str]:
            return {"id": api.create(ctx.idempotency_key)}

        def undo(ctx: StepContext) -> dict[str, str]:
            done = ctx.outputs.get(step) or {"id": api.create(ctx.action_key)}  # replay
            api.delete(done["id"])
            return {}

        return run, undo

    reserve, release = make("reserve")
    charge, refund = make("charge")
    last = scripted(PermanentError("no")) if fail_last else scripted({"ok": True})
    return Flow(
        name="saga",
        steps=(
            ActionStep("reserve", reserve, retry=retry, compensate=release),
            PollStep("wait", scripted({"ready": True}), policy=POLL),
            ActionStep("charge", charge, retry=retry, compensate=refund),
            ActionStep("finish", last, retry=retry),
        ),
    )


# -- 1. a step that crashes or hangs is bounded ------------------------------------------------


def test_a_handler_that_crashes_every_time_fails_after_its_attempts_and_is_undone() -> None:
    api = Api()
    h = Harness(saga(api))

    def crash_after_effect(ctx: StepContext) -> dict[str, str]:
        api.create(ctx.idempotency_key)  # the effect lands, then the process dies
        raise Crash()

    h.script("charge", crash_after_effect)
    record = h.run(h.start("saga"))
    assert record is not None and record.status is Status.FAILED
    assert record.result is not None and record.result.code == "HANDLER_CRASHED"
    assert len(h.calls_of("charge")) == FAST.max_attempts  # every delivery counted
    # the crashed step's effect (unknown: it never reported) and reserve's are both undone
    assert [c.step for c in h.calls if c.kind == "compensate"] == ["charge", "reserve"]
    assert api.live == set()


def test_crashes_count_across_sweeper_rescues() -> None:
    api = Api()
    h = Harness(saga(api))
    h.script("reserve", Crash())
    flow_id = h.start("saga")
    for _ in range(10):  # each crash: Cloud Tasks gives up, the sweeper re-creates the task
        h.deliver_next(flow_id)
        h.queue.tasks.clear()
        h.advance(3600)
        h.sweep()
        if (
            h.flow(flow_id).status is not Status.RUNNING
            and h.flow(flow_id).status is not Status.PENDING
        ):
            break
    record = h.run(flow_id)
    assert record is not None and record.result is not None
    assert record.result.code == "HANDLER_CRASHED"
    assert len(h.calls_of("reserve")) == FAST.max_attempts


# -- 2. a commit that can never succeed ends the flow ------------------------------------------


def test_a_commit_the_store_refuses_for_good_ends_the_flow_commit_refused() -> None:
    api = Api()
    h = Harness(saga(api))
    h.script("reserve", {"blob": "x" * 10})
    h.store.refuse = lambda doc: "too many index entries" if "blob" in str(doc["outputs"]) else None
    record = h.run(h.start("saga"))
    assert record is not None and record.status is Status.FAILED
    assert record.result is not None and record.result.code == "COMMIT_REFUSED"
    assert "too many index entries" in record.result.message
    assert len(h.calls_of("reserve")) == 1  # not retried for ever


def test_a_document_that_no_longer_parses_is_ended_not_retried() -> None:
    h = Harness(saga(Api()))
    flow_id = h.start("saga")
    h.store.docs[flow_id]["status"] = "BOGUS"  # a bad hand edit, or a schema change gone wrong
    assert h.deliver_next(flow_id) is Ran.NO_FLOW  # 2xx: the task is dropped, not retried
    assert h.store.docs[flow_id]["status"] == "FAILED"
    assert h.store.docs[flow_id]["result"]["code"] == "UNREADABLE"


def test_the_sweeper_ends_unreadable_documents_instead_of_tripping_on_them() -> None:
    h = Harness(saga(Api()))
    bad = h.start("saga", flow_id="bad")
    h.queue.tasks.clear()
    h.store.docs[bad]["position"] = {"nonsense": True}
    h.advance(3600)
    report = h.sweep()
    assert report.ended == 1
    assert h.store.docs[bad]["result"]["code"] == "UNREADABLE"


# -- 3. a flow whose type is no longer deployed -----------------------------------------------


def test_an_unknown_flow_type_is_retried_within_the_grace_window_then_failed() -> None:
    h = Harness(saga(Api()), limits=Limits(unknown_flow_grace_s=600))
    flow_id = h.start("saga")
    h.deliver_next(flow_id)  # reserve done
    h.deploy(Flow(name="other", steps=(ActionStep("x", scripted({})),)))
    record = h.run(flow_id)
    assert record is not None and record.status is Status.FAILED
    assert record.result is not None and record.result.code == "UNKNOWN_FLOW"
    assert record.result.error is not None and record.result.error["not_undone"] == ["reserve"]
    failures = [f for _, f in h.failed_deliveries]
    assert failures and all("does not run" in str(f) for f in failures)  # 5xx while in grace
    assert record.finished_at is not None
    assert record.finished_at - record.created_at >= timedelta(seconds=600)


def test_a_flow_of_an_unknown_type_can_be_cancelled() -> None:
    h = Harness(saga(Api()))
    flow_id = h.start("saga")
    h.deliver_next(flow_id)
    h.deploy(Flow(name="other", steps=(ActionStep("x", scripted({})),)))
    record = h.cancel(flow_id, "type retired")
    assert record.status is Status.CANCELLED
    assert record.result is not None and record.result.error == {"not_undone": ["reserve"]}


def test_the_sweeper_gets_past_stranded_flows_to_a_lost_one() -> None:
    h = Harness(saga(Api()), limits=Limits(unknown_flow_grace_s=10**6))
    for i in range(15):
        h.start("saga", flow_id=f"stranded-{i}")
    h.deploy([saga(Api()), Flow(name="other", steps=(ActionStep("x", scripted({})),))])
    for i in range(15):
        h.store.docs[f"stranded-{i}"]["flow"] = "retired"  # a type no deployment runs
    h.advance(60)
    lost = h.start("saga", flow_id="lost")
    h.queue.tasks.clear()  # every task is gone: the stranded ones' and the lost one's
    h.advance(3600)
    # each sweep looks at 10 flows: the first finds only stranded ones and sets them aside
    first = h.engine.sweep(grace_s=120, limit=10)
    second = h.engine.sweep(grace_s=120, limit=10)
    assert (first.overdue, first.rescued) == (10, 0)
    assert second.rescued == 1  # the lost flow was reached
    assert h.flow(lost).position.rescue == 1


# -- 4. a claim has an owner --------------------------------------------------------------------


def test_a_delivery_that_outlived_its_lease_cannot_overwrite_the_one_that_took_over() -> None:
    api = Api()
    # (no room for a late first dispatch: the first delivery's lease is 30 s, as a claim's)
    h = Harness(saga(api), limits=Limits(claim_lease_s=30, first_delivery_within_s=0))
    flow_id = h.start("saga")
    overtaken: list[Ran | None] = []

    def slow_reserve(ctx: StepContext) -> dict[str, str]:
        if len(h.calls_of("reserve")) == 1:  # the first delivery hangs past its lease ...
            h.advance(31)
            payload = h.flow(flow_id).next
            assert payload is not None
            from relayflow.core.position import TaskPayload

            # ... and Cloud Tasks delivers the task again meanwhile
            overtaken.append(h.deliver(TaskPayload(flow_id=flow_id, position=payload.position)))
        return {"id": api.create(ctx.idempotency_key)}

    h.script("reserve", slow_reserve)
    first = h.deliver_next(flow_id)
    assert overtaken == [Ran.ADVANCED]  # the second delivery committed
    assert first is Ran.STALE  # the first one's commit did not land
    record = h.flow(flow_id)
    assert [e.outcome for e in record.history if e.step == "reserve"] == ["succeeded"]
    assert len(api.live) == 1  # one effect: both sent the same key


def test_a_failed_commit_releases_the_claim_so_the_retry_need_not_wait() -> None:
    api = Api()
    h = Harness(saga(api), limits=Limits(claim_lease_s=3600))
    flow_id = h.start("saga")

    def fail_commit(ctx: StepContext) -> dict[str, str]:
        h.store.failing_writes = 1  # the commit after the effect fails (Firestore blips)
        return {"id": "r-1"}

    h.script("reserve", fail_commit, {"id": "r-1"})
    assert h.deliver_next(flow_id) is None  # 5xx
    started = h.now
    assert h.deliver_next(flow_id) is Ran.ADVANCED  # the redelivery claims at once
    assert h.now - started <= timedelta(seconds=10)  # not the 3600 s lease
    record = h.flow(flow_id)
    assert record.position.step == "wait"
    assert [e.outcome for e in record.history if e.step == "reserve"] == ["succeeded"]


def test_a_handler_knows_its_time_budget() -> None:
    h = Harness(saga(Api()), limits=Limits(action_budget_s=100, poll_budget_s=40))
    flow_id = h.start("saga")
    h.run(flow_id)
    reserve = h.calls_of("reserve")[0]
    wait = h.calls_of("wait")[0]
    assert reserve.deadline is not None and wait.deadline is not None
    assert reserve.time_left_s() == pytest.approx(100.0)
    assert reserve.time_left_s(cap_s=10) == 10
    assert wait.time_left_s() == pytest.approx(40.0)


# -- 5. the saga undoes every effect that may be live -------------------------------------------


def test_a_step_whose_responses_were_all_lost_is_undone() -> None:
    api = Api()
    h = Harness(saga(api))

    def lost_response(ctx: StepContext) -> dict[str, str]:
        api.create(ctx.idempotency_key)  # the effect happens ...
        raise RetryableError("500 after the effect")  # ... and the answer is lost

    h.script("reserve", lost_response)
    record = h.run(h.start("saga"))
    assert record is not None and record.result is not None
    assert record.result.code == "RETRIES_EXHAUSTED"
    undo = h.calls_of("reserve", undo=True)
    assert len(undo) == 1 and "reserve" not in undo[0].outputs
    assert undo[0].action_key == h.calls_of("reserve")[0].idempotency_key
    assert api.live == set()  # found by replaying under the action's key, and undone


def test_a_later_step_that_lost_its_responses_is_undone_before_the_earlier_ones() -> None:
    api = Api()
    h = Harness(saga(api, fail_last=False))

    def lost_response(ctx: StepContext) -> dict[str, str]:
        api.create(ctx.idempotency_key)
        raise RetryableError("lost")

    h.script("charge", lost_response)
    record = h.run(h.start("saga"))
    assert record is not None and record.status is Status.FAILED
    assert [c.step for c in h.calls if c.kind == "compensate"] == ["charge", "reserve"]
    assert api.live == set()


def test_a_retried_flow_never_leaves_two_live_effects_for_one_step() -> None:
    api = Api()
    h = Harness(saga(api))
    h.script_undo("reserve", PermanentError("the undo API is down"))
    h.script("charge", PermanentError("declined"))
    flow_id = h.start("saga")
    failed = h.run(flow_id)
    assert failed is not None and failed.status is Status.FAILED
    assert failed.effects[0].state is EffectState.UNDO_FAILED  # reserve may still be live
    h.script("charge", {"id": "c"})
    retried = h.retry(flow_id)
    assert retried.position.generation == 1
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED
    assert len(api.live) == 1  # reserve was kept, not made again


# -- 6 and 7. time bounds polls and the whole flow; timestamps are taken when things happen ----


def test_the_flow_deadline_bounds_action_retries_and_retry_after() -> None:
    h = Harness(saga(Api(), retry=RetryPolicy(max_attempts=20)))
    h.script("reserve", RetryableError("429", retry_after_s=600))
    record = h.run(h.start("saga", deadline_s=900))
    assert record is not None and record.status is Status.TIMED_OUT
    assert record.result is not None and record.result.code == "DEADLINE_EXCEEDED"
    assert record.finished_at is not None and record.finished_at <= record.created_at + timedelta(
        seconds=900
    )


def test_history_and_deadlines_count_from_when_a_slow_handler_finished() -> None:
    h = Harness(saga(Api()))

    def slow(ctx: StepContext) -> dict[str, str]:
        h.advance(40)  # the handler takes 40 s
        raise RetryableError("slow and failing")

    h.script("reserve", slow)
    flow_id = h.start("saga")
    started = h.now
    h.deliver_next(flow_id)
    entry = h.flow(flow_id).history[-1]
    assert entry.at == started + timedelta(seconds=40)  # when it finished, not when it began
    nxt = h.flow(flow_id).next
    assert nxt is not None and nxt.run_at == entry.at + timedelta(seconds=1)


def test_an_undo_is_told_the_callback_token_its_run_sent() -> None:
    # A callback step whose every answer was lost: its undo replays the run under its key, and
    # must send the same request (the token included), or the API refuses the key's reuse.
    sent: list[str] = []

    def register(ctx: StepContext) -> None:
        sent.append(ctx.callback_token)
        raise RetryableError("500 after the registration was made")

    undo = scripted({})
    step = CallbackStep("activate", run=register, compensate=undo, retry=FAST, timeout_s=60)
    h = Harness(Flow(name="cb", steps=(step,)))
    record = h.run(h.start("cb"))
    assert record is not None and record.status is Status.FAILED
    assert len(set(sent)) == 1 and sent[0]
    assert [c.callback_token for c in undo.calls] == [sent[0]]

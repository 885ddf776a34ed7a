"""Poll chains through the engine (``relayflow.testing``'s harness): a poll step's not-ready
polls write the flow's document only at checkpoints while its history still lists every poll
and its wait; duplicates, a lost chain task, a cancel, a backlog and a callback's safety net
all keep working.

The flow: ``register`` (action) -> ``await_active`` (poll) -> ``create_entity`` (action).
"""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

from relayflow import (
    ActionStep,
    CallbackStep,
    Flow,
    NotReady,
    PollPolicy,
    PollStep,
    RetryPolicy,
    StepContext,
)
from relayflow.core.engine import Ran
from relayflow.core.position import POLL_CHAIN, TaskKind, TaskPayload
from relayflow.core.state import Status
from relayflow.testing import Harness, scripted

POLL = PollPolicy(initial_s=1.0, multiplier=2.0, max_interval_s=30.0, max_polls=60, deadline_s=3600)
POLLS = 25  # the check is ready at its 25th poll


def active_at(polls: int) -> Any:
    """A check that is ready at its ``polls``-th poll (by the poll's number, so a duplicate
    delivery of a poll answers as the poll it copies)."""

    def check(ctx: StepContext) -> dict[str, Any]:
        if ctx.poll < polls - 1:
            raise NotReady("PENDING")
        return {"state": "ACTIVE"}

    return check


def registration(polls: int = POLLS) -> Flow:
    return Flow(
        name="reg",
        steps=(
            ActionStep("register", lambda ctx: {"id": "r-1"}, compensate=lambda ctx: {}),
            PollStep("await_active", active_at(polls), policy=POLL),
            ActionStep("create_entity", lambda ctx: {"entity": "e-1"}, retry=RetryPolicy()),
        ),
    )


def poll_entries(h: Harness, flow_id: str) -> list[Any]:
    return [e for e in h.flow(flow_id).history if e.kind is TaskKind.POLL]


def not_ready(h: Harness, flow_id: str) -> list[Any]:
    """The polls (or safety-net polls) the history lists that found nothing ready."""
    return [e for e in h.flow(flow_id).history if e.outcome.startswith("not ready")]


def deliver_polls(h: Harness, flow_id: str, n: int) -> None:
    """Deliver the register task, then ``n`` polls."""
    for _ in range(n + 1):
        h.deliver_next(flow_id)


def test_a_25_poll_flow_writes_its_document_at_most_7_times_and_lists_every_poll() -> None:
    h = Harness(registration())
    flow_id = h.start("reg", {})
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED
    # create (which claims register for its first dispatch), register's commit, one
    # checkpoint (poll 19), the ready poll (with create_entity's claim, inline),
    # create_entity's commit
    assert h.store.writes <= 4 + 3
    assert h.store.writes == 5
    polls = poll_entries(h, flow_id)
    assert [e.poll for e in polls] == list(range(POLLS)) and record.polls == POLLS
    waits = [e.delay_s for e in polls[:-1]]
    assert all(w is not None and w > 0 for w in waits)
    assert polls[-1].outcome == "ready"
    # each poll ran when the one before it said it would
    for before, after in itertools.pairwise(polls):
        assert before.delay_s is not None
        due = before.at + timedelta(seconds=before.delay_s)
        assert abs((after.at - due).total_seconds()) <= 0.001


def test_duplicate_deliveries_run_the_check_twice_and_make_one_next_task() -> None:
    h = Harness(registration(), duplicate_deliveries=True)
    flow_id = h.start("reg", {})
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED
    assert [e.poll for e in poll_entries(h, flow_id)] == list(range(POLLS))
    poll_tasks = [t for t in h.queue.spent if "-p0-p" in t and "await_active" in t]
    assert len(poll_tasks) == POLLS  # one task per poll: each duplicate's was deduplicated
    assert h.store.writes <= 4 + 3


def test_between_checkpoints_the_api_reads_the_polls_in_flight_from_the_chains_task() -> None:
    h = Harness(registration())
    flow_id = h.start("reg", {})
    deliver_polls(h, flow_id, 5)
    record = h.flow(flow_id)
    assert poll_entries(h, flow_id) == []  # nothing written since the step began
    in_flight = h.engine.polls_in_flight(record)
    assert [e.poll for e in in_flight] == [0, 1, 2, 3, 4]
    assert all(e.outcome == "not ready: PENDING" and e.delay_s for e in in_flight)


def test_a_healthy_chain_is_not_overdue_for_the_sweeper() -> None:
    h = Harness(registration())
    flow_id = h.start("reg", {})
    deliver_polls(h, flow_id, 8)
    pending = h.queue.only(flow_id)
    h.advance_to(pending.next.run_at + timedelta(seconds=200))  # long past poll 0's time
    writes = h.store.writes
    report = h.sweep(grace_s=120)
    assert report.overdue == 0 and h.store.writes == writes


def test_a_backlogged_chain_is_found_still_queued_not_rescued() -> None:
    h = Harness(registration())
    flow_id = h.start("reg", {})
    deliver_polls(h, flow_id, 3)
    record = h.flow(flow_id)
    assert record.next_run_at is not None
    h.advance_to(record.next_run_at + timedelta(seconds=300))  # the queue fell behind
    report = h.sweep(grace_s=120)
    assert (report.overdue, report.still_queued, report.rescued) == (1, 1, 0)
    assert h.run(flow_id) is not None
    assert h.flow(flow_id).status is Status.SUCCEEDED


def test_a_lost_chain_task_is_rescued_and_the_old_chain_is_stale() -> None:
    # given a chain whose task for poll 4 is lost (an earlier one of its tasks kept aside)
    h = Harness(registration())
    flow_id = h.start("reg", {})
    deliver_polls(h, flow_id, 2)
    old = h.queue.only(flow_id).payload()  # poll 2's, carrying polls 0 and 1
    deliver_polls(h, flow_id, 1)
    deliver_polls(h, flow_id, 0)
    lost = h.queue.only(flow_id)
    h.queue.lose(lost.next.task_id)
    record = h.flow(flow_id)
    assert record.next_run_at is not None
    h.advance_to(record.next_run_at + timedelta(seconds=121))

    # when the sweeper runs
    report = h.sweep(grace_s=120)

    # then the chain starts again from the document's poll under a new rescue number
    assert report.rescued == 1
    record = h.flow(flow_id)
    assert record.position.rescue == 1 and record.position.poll == 0
    assert record.history[-1].outcome == "rescued"
    # and a task of the old chain is stale
    assert h.deliver(old) is Ran.STALE
    done = h.run(flow_id)
    assert done is not None and done.status is Status.SUCCEEDED


def test_a_cancel_makes_the_chain_stale() -> None:
    h = Harness(registration())
    flow_id = h.start("reg", {})
    deliver_polls(h, flow_id, 4)
    pending = h.queue.only(flow_id).payload()
    checks = len(h.calls_of("await_active"))
    h.cancel(flow_id)
    assert h.deliver(pending) is Ran.STALE
    assert len(h.calls_of("await_active")) == checks
    done = h.run(flow_id)
    assert done is not None and done.status is Status.CANCELLED


def test_a_chain_task_carries_its_polls_through_the_http_boundary() -> None:
    h = Harness(registration())
    flow_id = h.start("reg", {})
    deliver_polls(h, flow_id, 3)
    payload = h.queue.only(flow_id).payload()
    body = payload.model_dump_json()
    assert '"chain"' in body
    assert TaskPayload.model_validate_json(body) == payload
    assert [n.poll for n in payload.chain] == [0, 1, 2] and payload.position.poll == 3


def test_a_callbacks_safety_net_polls_chain_too_and_the_callback_still_ends_the_wait() -> None:
    safety = PollPolicy(initial_s=5.0, multiplier=1.0, max_interval_s=5.0, max_polls=1000)
    flow = Flow(
        name="cb",
        steps=(
            CallbackStep(
                "await_active",
                lambda ctx: {"sent": True},
                timeout_s=3600,
                check=scripted(NotReady("no news")),
                policy=safety,
            ),
            ActionStep("finish", lambda ctx: {"ok": True}),
        ),
    )
    h = Harness(flow)
    flow_id = h.start("cb", {})
    h.deliver_next(flow_id)  # the run: sends, then waits
    writes = h.store.writes
    for _ in range(POLL_CHAIN - 1):  # safety-net polls, no news: no writes
        h.deliver_next(flow_id)
    assert h.store.writes == writes
    assert len(h.engine.polls_in_flight(h.flow(flow_id))) == POLL_CHAIN - 1
    answer = h.complete(h.token(flow_id, "await_active"), {"state": "ACTIVE"})
    assert answer.outcome.value == "completed"
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED


def test_a_chain_cut_by_a_cancel_records_the_polls_its_task_carried_once() -> None:
    # given a chain of 4 polls no checkpoint wrote, and its pending task
    h = Harness(registration())
    flow_id = h.start("reg", {})
    deliver_polls(h, flow_id, 4)
    pending = h.queue.only(flow_id).payload()
    assert [n.poll for n in pending.chain] == [0, 1, 2, 3]
    h.cancel(flow_id)
    assert not_ready(h, flow_id) == []

    # when the stale task arrives, twice
    writes = h.store.writes
    assert h.deliver(pending) is Ran.STALE
    assert h.deliver(pending) is Ran.STALE

    # then its polls are in the history, once, before the cancel, in one write
    assert h.store.writes == writes + 1
    record = h.flow(flow_id)
    assert [e.poll for e in not_ready(h, flow_id)] == [0, 1, 2, 3]
    assert record.polls == 4
    outcomes = [e.outcome for e in record.history]
    assert outcomes.index("not ready: PENDING") < outcomes.index("cancelled")
    done = h.run(flow_id)
    assert done is not None and done.status is Status.CANCELLED


def test_a_duplicate_of_a_chain_task_a_checkpoint_wrote_writes_nothing() -> None:
    h = Harness(registration())
    flow_id = h.start("reg", {})
    deliver_polls(h, flow_id, 3)
    early = h.queue.only(flow_id).payload()  # poll 3's, carrying 0..2
    record = h.run(flow_id)  # the checkpoint and the ready poll write them
    assert record is not None and record.status is Status.SUCCEEDED
    writes = h.store.writes
    assert h.deliver(early) is Ran.STALE
    assert h.store.writes == writes
    assert [e.poll for e in poll_entries(h, flow_id)] == list(range(POLLS))


def test_a_callback_arriving_mid_chain_keeps_the_safety_net_polls_in_the_history() -> None:
    safety = PollPolicy(initial_s=5.0, multiplier=1.0, max_interval_s=5.0, max_polls=1000)
    flow = Flow(
        name="cb",
        steps=(
            CallbackStep(
                "await_active",
                lambda ctx: {"sent": True},
                timeout_s=3600,
                check=scripted(NotReady("no news")),
                policy=safety,
            ),
            ActionStep("finish", lambda ctx: {"ok": True}),
        ),
    )
    h = Harness(flow, poll_chain=5)
    flow_id = h.start("cb", {})
    h.deliver_next(flow_id)  # the run: sends, then waits
    for _ in range(7):  # a checkpoint at the fifth, two polls carried since
        h.deliver_next(flow_id)
    assert [e.poll for e in not_ready(h, flow_id)] == [0, 1, 2, 3, 4]
    h.complete(h.token(flow_id, "await_active"), {"state": "ACTIVE"})
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED
    assert h.deliver_next(flow_id) is Ran.STALE  # the chain's task, after the flow ended
    history = h.flow(flow_id).history
    assert [e.poll for e in not_ready(h, flow_id)] == [0, 1, 2, 3, 4, 5, 6]
    # each where it ran: before the callback's completion
    assert [e.outcome for e in history].index("completed") == 1 + 7


def test_the_chains_length_is_the_harness_setting() -> None:
    h = Harness(registration(), poll_chain=3)
    flow_id = h.start("reg", {})
    record = h.run(flow_id)
    assert record is not None and record.status is Status.SUCCEEDED
    # create (claiming register), register's commit, checkpoints at polls 2, 5, … 23 (8), the
    # ready poll (with create_entity's claim), create_entity's commit
    assert h.store.writes == 2 + 8 + 2
    assert [e.poll for e in poll_entries(h, flow_id)] == list(range(POLLS))


def test_a_queue_that_cannot_be_read_leaves_the_polls_in_flight_out_and_nothing_else() -> None:
    # given a flow between checkpoints, and a queue that refuses reads (no tasks.get right)
    h = Harness(registration())
    flow_id = h.start("reg", {})
    deliver_polls(h, flow_id, 3)

    def refused(*args: Any) -> TaskPayload | None:
        raise PermissionError("cloudtasks.tasks.get denied")

    h.queue.pending = refused  # type: ignore[method-assign]

    # then a reader of the flow sees no polls in flight, rather than an error
    assert h.engine.polls_in_flight(h.flow(flow_id)) == ()

"""relayflow.core.planner.chain: a poll plainly not ready between a chain's checkpoints needs
no write; every POLL_CHAIN-th poll, an error, a hint, the step's end and the flow's deadline
write, with every poll the chain carried in the history.

Each test plays a chain as the engine does: the stored record (``doc``), the task's position
and the polls its body carried, replayed, then planned, then asked whether it ``carries``.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import datetime, timedelta

from relayflow.core import planner
from relayflow.core.errors import RetryableError
from relayflow.core.planner import Completed, Outcome, Retry
from relayflow.core.planner.chain import (
    candidates,
    carries,
    entries_of,
    next_notes,
    recorded_late,
    replayed,
)
from relayflow.core.position import (
    MAX_POLL_CHAIN,
    POLL_CHAIN,
    PollNote,
    Position,
    TaskKind,
    TaskPayload,
)
from relayflow.core.records import FlowRecord, HistoryEntry
from relayflow.core.state import Status

from .sample import FLOW_ID, NOW, POLL, POLL_KEY, at_poll, make_flow, not_ready, plan


class Chain:
    """A chain's tasks, delivered one after another at the time each is due."""

    def __init__(self, doc: FlowRecord) -> None:
        self.doc = doc  # what the store has
        self.position = doc.position  # the next task's
        self.carried: tuple[HistoryEntry, ...] = ()
        self.at = doc.next.run_at if doc.next else NOW
        self.writes = 0

    def poll(self, outcome: Outcome, *, flow: object = None) -> FlowRecord:
        """Deliver the next task with ``outcome``: what the planner plans (written or not)."""
        p = plan(self.at) if flow is None else plan(self.at, flow=flow)  # type: ignore[arg-type]
        record = replayed(self.doc.focused("await_ready"), self.position, self.carried)
        planned = planner.after(p, record, outcome)
        if carries(record, planned, outcome, carried=len(self.carried), chain=POLL_CHAIN):
            assert planned.next is not None
            payload = TaskPayload(
                flow_id=FLOW_ID,
                position=planned.next.position,
                chain=next_notes(planned, len(self.carried)),
            )  # what the next task's body says, checked as the HTTP boundary checks it
            self.carried, self.position = entries_of(payload), payload.position
            self.at = planned.next.run_at
            return planned
        self.writes += 1
        self.doc, self.carried = planned.stored(), ()
        if planned.next is not None:
            self.position, self.at = planned.next.position, planned.next.run_at
        return planned


def polls_of(record: FlowRecord) -> list[HistoryEntry]:
    return [e for e in record.history if e.kind is TaskKind.POLL]


def test_a_poll_plainly_not_ready_writes_nothing_and_its_next_task_carries_it() -> None:
    chain = Chain(at_poll())
    planned = chain.poll(not_ready())
    assert chain.writes == 0
    assert [(e.poll, e.outcome) for e in chain.carried] == [(0, "not ready: still pending")]
    assert chain.position.poll == 1 and planned.next is not None
    assert chain.carried[0].delay_s == planned.history[-1].delay_s


def test_every_poll_chain_th_poll_writes_every_poll_of_the_chain_with_its_wait() -> None:
    chain = Chain(at_poll())
    for _ in range(POLL_CHAIN - 1):
        chain.poll(not_ready())
    assert chain.writes == 0 and len(chain.carried) == POLL_CHAIN - 1
    chain.poll(not_ready())  # the chain's last: the next poll would be the POLL_CHAIN-th
    assert chain.writes == 1 and chain.carried == ()
    written = polls_of(chain.doc)
    assert [e.poll for e in written] == list(range(POLL_CHAIN))
    assert all(e.delay_s is not None and e.delay_s > 0 for e in written)
    assert chain.doc.polls == POLL_CHAIN and chain.doc.position.poll == POLL_CHAIN
    # each wait is the one the poll chose: the next poll ran when it said
    for before, after in itertools.pairwise(written):
        assert before.delay_s is not None
        due = before.at + timedelta(seconds=before.delay_s)
        assert abs((after.at - due).total_seconds()) <= 0.001  # the history keeps ms


def test_the_next_chain_begins_at_the_checkpoint_and_writes_as_the_first_did() -> None:
    long = make_flow(poll=replace(POLL, deadline_s=7200.0))
    chain = Chain(at_poll(flow=long))
    for _ in range(2 * POLL_CHAIN):
        chain.poll(not_ready(), flow=long)
    assert chain.writes == 2
    assert [e.poll for e in polls_of(chain.doc)] == list(range(2 * POLL_CHAIN))


def test_a_retryable_error_writes_at_once_with_the_polls_before_it() -> None:
    chain = Chain(at_poll())
    chain.poll(not_ready())
    chain.poll(not_ready())
    chain.poll(Retry(RetryableError("503 from the API")))
    assert chain.writes == 1
    assert [e.outcome for e in polls_of(chain.doc)] == [
        "not ready: still pending",
        "not ready: still pending",
        "retryable error: 503 from the API",
    ]
    assert chain.doc.position.attempt == 1  # an error in a row: its own position
    chain.poll(not_ready())  # and the chain goes on from there, writing nothing
    assert chain.writes == 1 and chain.position.attempt == 0


def test_a_not_ready_with_a_hint_of_when_to_come_back_writes() -> None:
    chain = Chain(at_poll())
    chain.poll(not_ready())
    chain.poll(not_ready("busy", delay_s=7.0))
    assert chain.writes == 1
    assert polls_of(chain.doc)[-1].delay_s == 7.0


def test_the_ready_poll_writes_the_step_with_every_poll_before_it() -> None:
    chain = Chain(at_poll())
    for _ in range(5):
        chain.poll(not_ready())
    planned = chain.poll(Completed({"state": "READY"}))
    assert chain.writes == 1
    assert [e.poll for e in polls_of(planned)] == [0, 1, 2, 3, 4, 5]
    assert polls_of(planned)[-1].outcome == "ready"
    assert planned.polls == 6 and planned.position.step == "finish"


def test_the_deadline_ends_the_chain_with_a_write_of_every_poll() -> None:
    short = make_flow(poll=replace(POLL, deadline_s=20.0))
    chain = Chain(at_poll(flow=short))
    planned = chain.poll(not_ready(), flow=short)
    for _ in range(POLL_CHAIN):
        if chain.writes:
            break
        planned = chain.poll(not_ready(), flow=short)
    assert chain.writes == 1 and planned.status is Status.COMPENSATING
    assert planned.pending_result is not None
    assert planned.pending_result.code == "DEADLINE_EXCEEDED"
    # every poll up to the deadline is in the history, the last one landing on it
    polls = polls_of(planned)
    assert [e.poll for e in polls] == list(range(len(polls)))
    assert polls[-1].at <= NOW + timedelta(seconds=20.0) <= polls[-1].at + timedelta(seconds=1)


def test_max_polls_ends_the_chain_with_a_write() -> None:
    few = make_flow(poll=replace(POLL, max_polls=4))
    chain = Chain(at_poll(flow=few))
    for _ in range(4):
        planned = chain.poll(not_ready(), flow=few)
    assert chain.writes == 1
    assert planned.pending_result is not None
    assert planned.pending_result.code == "MAX_POLLS_EXCEEDED"
    assert [e.poll for e in polls_of(planned)] == [0, 1, 2, 3]


def test_a_checkpoint_makes_the_flow_due_when_its_next_chain_ends() -> None:
    # given the first chain written at its last poll (a deadline far enough not to clip it)
    long = make_flow(poll=replace(POLL, deadline_s=7200.0))
    chain = Chain(at_poll(flow=long))
    for _ in range(POLL_CHAIN):
        chain.poll(not_ready(), flow=long)
    doc = chain.doc
    assert doc.next is not None and doc.next_run_at is not None
    # then the flow is due (for the sweeper) when the next chain's last poll is
    wait_s = sum(POLL.delay_s(n=n, key=POLL_KEY) for n in range(POLL_CHAIN, 2 * POLL_CHAIN - 1))
    assert doc.next_run_at == doc.next.run_at + timedelta(seconds=wait_s)


def test_a_poll_step_that_starts_is_due_when_its_first_chain_ends() -> None:
    doc = at_poll()
    assert doc.next is not None and doc.next_run_at is not None
    wait_s = sum(POLL.delay_s(n=n, key=POLL_KEY) for n in range(POLL_CHAIN - 1))
    assert doc.next_run_at == doc.next.run_at + timedelta(seconds=wait_s)


def test_a_chains_end_is_clipped_to_the_deadline() -> None:
    short = make_flow(poll=replace(POLL, deadline_s=20.0))
    doc = at_poll(flow=short)
    assert doc.next_run_at == NOW + timedelta(seconds=20.0)


def test_replaying_a_replayed_record_changes_nothing() -> None:
    chain = Chain(at_poll())
    chain.poll(not_ready())
    chain.poll(not_ready())
    once = replayed(chain.doc.focused("await_ready"), chain.position, chain.carried)
    twice = replayed(once.focused("await_ready"), chain.position, chain.carried)
    assert twice == once and once.polls == 2 and once.position.poll == 2


def test_a_chains_candidate_tasks_are_its_polls_from_the_stored_one() -> None:
    doc = at_poll()
    assert doc.next is not None
    found = candidates(doc.key, doc.next, POLL_CHAIN)
    assert [t.position.poll for t in found] == list(range(POLL_CHAIN))
    assert len({t.task_id for t in found}) == POLL_CHAIN
    action = doc.next.model_copy(
        update={"position": Position(step_index=0, step="reserve", kind=TaskKind.ACTION)}
    )
    assert candidates(doc.key, action, POLL_CHAIN) == [action]


def test_a_chain_longer_than_its_bound_or_out_of_order_is_refused() -> None:
    import pytest

    pos = at_poll().position.at_poll(3)
    note = PollNote(at=datetime(2026, 1, 1), poll=2, seen="not ready", delay_s=1.0)
    assert TaskPayload(flow_id=FLOW_ID, position=pos, chain=(note,)).chain == (note,)
    with pytest.raises(ValueError, match="do not lead to poll 3"):
        TaskPayload(flow_id=FLOW_ID, position=pos, chain=(note.model_copy(update={"poll": 1}),))
    action = Position(step_index=0, step="reserve", kind=TaskKind.ACTION, poll=3)
    with pytest.raises(ValueError, match="carries no poll chain"):
        TaskPayload(flow_id=FLOW_ID, position=action, chain=(note,))
    far = pos.at_poll(MAX_POLL_CHAIN + 5)
    notes = tuple(note.model_copy(update={"poll": n}) for n in range(5, MAX_POLL_CHAIN + 5))
    with pytest.raises(ValueError, match="at most"):
        TaskPayload(flow_id=FLOW_ID, position=far, chain=notes)
    assert "chain" not in TaskPayload(flow_id=FLOW_ID, position=pos).model_dump()


def note_entry(poll: int, at: datetime) -> HistoryEntry:
    return HistoryEntry(
        at=at, step="await_ready", kind=TaskKind.POLL, poll=poll, outcome="not ready: PENDING"
    )


def test_a_cut_chains_polls_go_into_the_history_at_their_times_once() -> None:
    doc = at_poll()
    cut = HistoryEntry(
        at=NOW + timedelta(seconds=10), step="~", kind=TaskKind.POLL, outcome="cancelled"
    )
    record = doc.model_copy(update={"history": [*doc.history, cut]})
    carried = [
        note_entry(0, NOW + timedelta(seconds=1)),
        note_entry(1, NOW + timedelta(seconds=10)),
    ]
    late = recorded_late(plan(NOW), record, carried)
    assert late is not None
    assert late.history[-3:] == [*carried, cut]  # a poll of the cut's time goes before it
    assert late.polls == record.polls + 2
    assert recorded_late(plan(NOW), late, carried) is None  # there already: no write


def test_polls_older_than_a_trimmed_history_are_taken_as_trimmed() -> None:
    kept = note_entry(5, NOW + timedelta(seconds=5))
    record = at_poll().model_copy(update={"history": [kept], "history_dropped": 40})
    assert recorded_late(plan(NOW), record, [note_entry(1, NOW + timedelta(seconds=1))]) is None
    newer = note_entry(6, NOW + timedelta(seconds=6))
    late = recorded_late(plan(NOW), record, [note_entry(1, NOW), newer])
    assert late is not None and late.history == [kept, newer]


def test_a_cut_chains_polls_keep_the_history_bounded() -> None:
    p = replace(plan(NOW), history_limit=10)
    record = at_poll().model_copy(
        update={"history": [note_entry(n, NOW + timedelta(seconds=n)) for n in range(10)]}
    )
    late = recorded_late(p, record, [note_entry(10, NOW + timedelta(seconds=10))])
    assert late is not None and len(late.history) <= 10
    assert late.history_dropped == record.history_dropped + 11 - len(late.history)
    assert late.history[-1].poll == 10

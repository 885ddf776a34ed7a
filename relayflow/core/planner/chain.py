"""Poll chains: polls that find nothing ready carry their log from task to task, and the flow's
document is written only at checkpoints.

A poll that is plainly not ready (no error, no Retry-After) changes nothing a reader needs at
once: its next poll's time follows from the schedule (hash-derived jitter, deterministic task
names). So it writes nothing; it makes the next poll's task, whose body carries the polls since
the document was last written (``TaskPayload.chain``). The document is written — a checkpoint,
recording every carried poll in the history — when the next poll would be the
``Plan.poll_chain``-th since the last write (RELAYFLOW_POLL_CHAIN, default ``POLL_CHAIN``), on
an error or a hint (their times are not the schedule's), when the step ends or the flow does.
A task is current for a chain's track if it is the stored position or a later poll of it
(``Position.chains_to``); a rescue, a cancel or a retry moves the stored position, which makes
the whole chain stale.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from datetime import datetime, timedelta

from relayflow.core.flows import PollPolicy
from relayflow.core.planner.history import over_limit
from relayflow.core.planner.plan import Outcome, Plan, Waiting
from relayflow.core.position import (
    CHAINED,
    MAX_NOTE_CHARS,
    PollNote,
    Position,
    TaskPayload,
    task_id,
)
from relayflow.core.records import FlowRecord, HistoryEntry, NextTask


def notes_of(entries: Sequence[HistoryEntry]) -> tuple[PollNote, ...]:
    """What a chain's task carries of ``entries`` (polls of the step it polls)."""
    return tuple(
        PollNote(
            at=e.at,
            poll=e.poll,
            attempt=e.attempt,
            seen=e.outcome[:MAX_NOTE_CHARS],
            delay_s=e.delay_s or 0.0,
        )
        for e in entries
    )


def entries_of(payload: TaskPayload) -> tuple[HistoryEntry, ...]:
    """The history entries of the polls ``payload``'s chain carried."""
    pos = payload.position
    return tuple(
        HistoryEntry(
            at=note.at,
            generation=pos.generation,
            step=pos.step,
            kind=pos.kind,
            attempt=note.attempt,
            poll=note.poll,
            outcome=note.seen,
            delay_s=note.delay_s,
        )
        for note in payload.chain
    )


def replayed(record: FlowRecord, position: Position, carried: Sequence[HistoryEntry]) -> FlowRecord:
    """``record``, focused on a chain's track, moved on to the chain's task at ``position``
    with the polls it ``carried`` in its history: the record as it would be had every poll
    been written. A record already there is returned as it is (so replaying twice is once)."""
    key = record.focus
    if record.position == position or key is None:
        return record
    nxt = record.next
    if nxt is not None:
        last = carried[-1] if carried else None
        run_at = last.at + timedelta(seconds=last.delay_s or 0) if last else nxt.run_at
        named = task_id(record.key, position)
        nxt = nxt.model_copy(update={"position": position, "task_id": named, "run_at": run_at})
    # The track too, so that focusing the record again finds it at the chain's poll.
    track = record.tracks[key].model_copy(update={"position": position, "next": nxt})
    return record.model_copy(
        update={
            "position": position,
            "next": nxt,
            "tracks": {**record.tracks, key: track},
            "history": [*record.history, *carried],
            "polls": record.polls + len(carried),
        }
    )


def recorded_late(
    plan: Plan, record: FlowRecord, carried: Sequence[HistoryEntry]
) -> FlowRecord | None:
    """``record`` with the polls a stale chain task ``carried`` that its history lacks, each
    at its time among the entries there; None if it has them all (a duplicate, or a later
    checkpoint wrote them).

    A chain cut mid-way — its flow rescued, cancelled, retried, or its callback arrived — has
    run polls no checkpoint wrote: its task, stale when it arrives, is the last that knows
    them. A poll is the history's if an entry names it (generation, step, kind, try, poll and
    time); one older than the oldest entry a trimmed history kept is taken as trimmed."""
    kept = {_named(e) for e in record.history}
    oldest = record.history[0].at if record.history_dropped and record.history else None
    missing = [e for e in carried if _named(e) not in kept and (oldest is None or e.at >= oldest)]
    if not missing:
        return None
    # A merge, not a sort: the entries already there keep their order whatever their times;
    # a poll goes before an entry of the same time (it ran before what cut its chain).
    history = list(heapq.merge(missing, record.history, key=lambda e: e.at))
    dropped = over_limit(plan, history)
    return record.model_copy(
        update={
            "history": history[dropped:],
            "history_dropped": record.history_dropped + dropped,
            "polls": record.polls + len(missing),  # as a checkpoint counts them (``replayed``)
        }
    )


def _named(e: HistoryEntry) -> tuple[object, ...]:
    return (e.generation, e.step, e.kind, e.attempt, e.poll, e.at)


def carries(
    before: FlowRecord, planned: FlowRecord, outcome: Outcome, *, carried: int, chain: int
) -> bool:
    """Whether ``planned`` — what ``outcome`` of the poll at ``before``'s position, which
    carried ``carried`` polls, leads to — need not be written: the poll was plainly not ready
    (no error, no hint of when to come back) and its next poll is still in the chain (fewer
    than ``chain`` polls since the document was last written)."""
    if not isinstance(outcome, Waiting) or outcome.signal.delay_s is not None:
        return False
    if carried + 1 >= chain or before.position.kind not in CHAINED:
        return False
    if planned.focus is None or planned.focus != before.focus:
        return False
    if planned.status is not before.status or planned.next is None:
        return False
    after = before.position.at_poll(before.position.poll + 1)
    return planned.position == after and planned.next.position == after


def next_notes(planned: FlowRecord, carried: int) -> tuple[PollNote, ...]:
    """What the next task of a chain carries: the ``carried`` polls its task carried, and the
    poll it ran (``planned``'s newest history entries, whatever a trim left before them)."""
    return notes_of(planned.history[-(carried + 1) :])


def candidates(key: str, nxt: NextTask, chain: int) -> list[NextTask]:
    """The tasks the chain of ``chain`` polls that begins with ``nxt`` (a track's stored next
    task) may have in its queue now, oldest first: ``nxt`` itself and the chain's later polls."""
    first = nxt.position
    if first.kind not in CHAINED:
        return [nxt]
    later = (first.at_poll(first.poll + n) for n in range(1, chain))
    made = (nxt.model_copy(update={"position": p, "task_id": task_id(key, p)}) for p in later)
    return [nxt, *made]


def first_chain_end(plan: Plan, record: FlowRecord, nxt: NextTask) -> datetime | None:
    """When the first chain of a poll step that starts with ``nxt`` ends (see
    ``chain_end``); None if ``nxt`` is no poll step's first poll."""
    if nxt.position.kind not in CHAINED:
        return None
    step = plan.kinds.container(plan.flow, nxt.position.scope).step(nxt.position.step_index)
    policy = plan.kinds.of(step).policy(step)
    if policy is None:
        return None
    own = plan.now + timedelta(seconds=policy.deadline_s)
    deadline = min(own, record.deadline_at) if record.deadline_at else own
    return chain_end(
        record,
        nxt,
        policy=policy,
        max_polls=policy.max_polls,
        deadline=deadline,
        chain=plan.poll_chain,
    )


def chain_end(
    record: FlowRecord,
    nxt: NextTask,
    *,
    policy: PollPolicy,
    max_polls: int | None,
    deadline: datetime,
    chain: int,
) -> datetime:
    """When the last poll of the chain of ``chain`` polls that begins with ``nxt`` is due if
    each one before it is plainly not ready: the latest the chain's next write comes (so the
    sweeper, which reads it as the flow's due time, does not take a healthy chain for a lost
    one)."""
    first = nxt.position.poll
    last = first + chain - 1
    if max_polls is not None:  # the poll that uses up max_polls ends the step: a write
        last = min(last, max_polls - 1 + record.poll_errors)
    key = f"{record.flow_id}:{nxt.position.step}"
    wait_s = sum(policy.delay_s(n=n, key=key) for n in range(first, last))
    return min(nxt.run_at + timedelta(seconds=wait_s), max(deadline, nxt.run_at))


def due_at_chain_end(record: FlowRecord, end: datetime | None) -> FlowRecord:
    """``record`` due, for the sweeper, when its chain's next write is (``end``), if that
    chain's track is its only one: with another track running, the flow stays due when the
    other's task is (the sweeper then finds the chain still queued, and sets it aside)."""
    if end is None or len(record.tracks) > 1:
        return record
    return record.model_copy(update={"aside_until": end})

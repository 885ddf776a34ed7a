"""Poll chains as their queue holds them: whether a chain is still queued (the sweeper's
question), and the polls it has run that its flow's document has not recorded yet (what the
api, the console and ``relayflow watch`` show, marked as not yet written).

Between two checkpoints a chain's log rides in its newest task's body
(``core.planner.chain``), so both read the chain's candidate tasks from the queue: at most
``chain`` reads (the chain's length), and only for a flow someone looks at or the sweeper
finds overdue.
"""

from __future__ import annotations

from relayflow.core.planner.chain import candidates, entries_of
from relayflow.core.ports import Queue
from relayflow.core.position import CHAINED, TaskPayload
from relayflow.core.records import FlowRecord, HistoryEntry, NextTask
from relayflow.core.state import ACTIVE


def queued(queue: Queue, key: str, nxt: NextTask, chain: int) -> bool:
    """Whether a track's task is still queued: its stored next task or, for a poll chain,
    any later poll the chain may have made since its last write."""
    if nxt.position.kind not in CHAINED:
        return queue.exists(nxt)
    return queue.pending(key, candidates(key, nxt, chain)) is not None


def in_flight(queue: Queue, record: FlowRecord, chain: int) -> tuple[HistoryEntry, ...]:
    """The polls ``record``'s chains ran that its document has not recorded yet, oldest first
    (none for an ended flow, or one with no chain running)."""
    if record.status not in ACTIVE:
        return ()
    found: list[HistoryEntry] = []
    for track in record.tracks.values():
        pending = _pending(queue, record.key, track.next, chain)
        if pending is not None:
            found += entries_of(pending)
    return tuple(sorted(found, key=lambda e: e.at))


def _pending(queue: Queue, key: str, nxt: NextTask | None, chain: int) -> TaskPayload | None:
    if nxt is None or nxt.position.kind not in CHAINED:
        return None
    return queue.pending(key, candidates(key, nxt, chain))

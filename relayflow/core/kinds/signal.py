"""WaitForSignal steps: wait for a named signal sent to the flow by its id.

The step's first task (wait 0) looks for a signal that came early, kept on the document
(``FlowRecord.signals``): if one names the step, the step consumes it and ends with it.
Otherwise the step waits, holding no worker and at most one Cloud Task: its timeout's (or the
flow's deadline's), none if it has neither. The timeout is fixed on the track
(``Track.signal_until``) in that commit, so a duplicate task never moves it; a timeout
further ahead than Cloud Tasks schedules (30 days, see ``kinds.sleep``) is chained in hops,
as a sleep is. A signal that comes while the step waits ends it in the signal's own write
(``engine.signals``); the timeout task it leaves is stale and does nothing when it comes.

Both the kept and the delivered way end the step here (``delivered``), so its output, its
history and the remembered signal id are the same whichever came first. The bounds:
``MAX_PENDING`` signals kept per document, ``MAX_SIGNAL_BYTES`` of data each, the last
``MAX_SIGNAL_IDS`` ids remembered (a resend within them is a no-op).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, ClassVar

from relayflow.core.flows import Flow, Handler, Step, StepContext, WaitForSignal
from relayflow.core.kinds.base import Kind, Kinds, Wrap
from relayflow.core.planner.forward import advance
from relayflow.core.planner.history import log, new_entry, timeout_of
from relayflow.core.planner.plan import (
    MAX_SCHEDULE_AHEAD_S,
    Plan,
    Retry,
    Waiting,
    schedule,
    step_of,
)
from relayflow.core.planner.saga import begin_failure
from relayflow.core.planner.states import move, with_next
from relayflow.core.position import Position, TaskKind
from relayflow.core.records import FlowRecord, HistoryEntry, PendingSignal
from relayflow.core.state import Status

# Signals kept per flow document before the flow reaches their step: a few approvals ahead
# is plenty, and 16 x MAX_SIGNAL_BYTES keeps them a small part of the document, which
# Firestore caps at 1 MiB (https://cloud.google.com/firestore/quotas#collections_documents_and_fields).
MAX_PENDING = 16
MAX_SIGNAL_BYTES = 8 * 1024
# Ids of the latest signals taken (kept or consumed) remembered, so a resend is a no-op.
MAX_SIGNAL_IDS = 64
MAX_SIGNAL_ID = 128
MAX_REASON = 500


class SignalWait(Kind):
    step_type: ClassVar[type] = WaitForSignal
    name: ClassVar[str] = "signal"
    forward: ClassVar[TaskKind] = TaskKind.SIGNAL
    tasks: ClassVar[frozenset[TaskKind]] = frozenset({TaskKind.SIGNAL})

    def handler(self, step: Step, task: TaskKind) -> Handler | None:
        assert isinstance(step, WaitForSignal)
        return step.arrived or arrived

    def retries(self, task: TaskKind) -> bool:
        return False  # a wait's hop is its schedule, not a retry of a dependency's call

    def done(self, plan: Plan, record: FlowRecord, output: dict[str, Any]) -> FlowRecord:
        step = step_of(plan, record.position)
        assert isinstance(step, WaitForSignal)
        if record.position.poll == 0:
            kept = kept_for(record, step)
            if kept is not None:
                return delivered(plan, record, kept)
            return begin_wait(plan, record, step)
        return wait_on(plan, record, step)

    def again(self, plan: Plan, record: FlowRecord, outcome: Retry | Waiting) -> FlowRecord:
        raise AssertionError("a signal step's task runs no handler that can raise")

    def describe(self, step: Step) -> str:
        assert isinstance(step, WaitForSignal)
        names = " or ".join(step.signals)
        if step.timeout_s is None:
            return f"wait for signal {names}, no timeout"
        then = "fail" if step.on_timeout == "fail" else "continue"
        return f"wait for signal {names}, timeout {step.timeout_s:g}s then {then}"

    def wrapped(self, step: Step, wrap: Wrap) -> Step:
        assert isinstance(step, WaitForSignal)
        return replace(step, arrived=wrap(step.name, TaskKind.SIGNAL, step.arrived or arrived))


def arrived(ctx: StepContext) -> None:
    """A signal step's task: nothing to call (the planner looks at the document)."""
    return None


def kept_for(record: FlowRecord, step: WaitForSignal) -> PendingSignal | None:
    """The oldest signal kept for ``step`` (for the record's current item, in a lane)."""
    item = record.item_index
    return next(
        (s for s in record.signals if s.name in step.signals and s.item == item),
        None,
    )


def output_of(signal: PendingSignal) -> dict[str, Any]:
    """What a signal step that ``signal`` ended outputs."""
    return {
        "signal": signal.name,
        "data": signal.data,
        "by": signal.by,
        "reason": signal.reason,
        "signal_id": signal.signal_id,
        "at": signal.at.isoformat(),
    }


def remembered(ids: list[str], signal_id: str | None) -> list[str]:
    """``ids`` with ``signal_id`` added, the oldest dropped past ``MAX_SIGNAL_IDS``."""
    if signal_id is None or signal_id in ids:
        return ids
    return [*ids, signal_id][-MAX_SIGNAL_IDS:]


def delivered(plan: Plan, record: FlowRecord, signal: PendingSignal) -> FlowRecord:
    """The focused signal step ends with ``signal`` (kept or just sent): its history entry
    says who sent it (``by``) and why (``detail``); it leaves the kept signals, and its id
    is remembered."""
    pos = record.position
    seen = f"signal {signal.name}"
    kept = [s for s in record.signals if s is not signal]
    record = record.model_copy(
        update={"signals": kept, "signal_ids": remembered(record.signal_ids, signal.signal_id)}
    )
    ended = advance(plan, record, output_of(signal), seen=seen)
    return ended.model_copy(update={"history": signed(ended.history, pos, seen, signal)})


def signed(
    history: list[HistoryEntry], pos: Position, seen: str, signal: PendingSignal
) -> list[HistoryEntry]:
    """``history`` with the entry that says the step took ``signal`` naming who and why."""
    for i in range(len(history) - 1, -1, -1):
        entry = history[i]
        if entry.step == pos.step and entry.poll == pos.poll and entry.outcome == seen:
            update = {"by": signal.by[:200], "detail": signal.reason[:MAX_REASON]}
            return [*history[:i], entry.model_copy(update=update), *history[i + 1 :]]
    return history


def begin_wait(plan: Plan, record: FlowRecord, step: WaitForSignal) -> FlowRecord:
    """No signal was kept for the step: it waits, its timeout fixed on its track now."""
    key = record.focus
    assert key is not None
    until = None if step.timeout_s is None else plan.now + timedelta(seconds=step.timeout_s)
    waits = {"signal_until": until, "waiting_for": list(step.signals)}
    tracks = {**record.tracks, key: record.tracks[key].model_copy(update=waits)}
    return hold(plan, record.model_copy(update={"tracks": tracks}), until, first=True)


def wait_on(plan: Plan, record: FlowRecord, step: WaitForSignal) -> FlowRecord:
    """A task of a waiting signal step came: its timeout (or the flow's deadline) has passed,
    or it is a hop of a long wait and the step waits on."""
    key = record.focus
    assert key is not None
    until = record.tracks[key].signal_until
    deadline = record.deadline_at
    names = " or ".join(step.signals)
    if deadline is not None and plan.now >= deadline and (until is None or until > deadline):
        message = f"the flow's deadline passed while it waited for signal {names}"
        err = timeout_of(record, "DEADLINE_EXCEEDED", message)
        return begin_failure(plan, record, Status.TIMED_OUT, err, "deadline passed")
    if until is not None and plan.now >= until:
        if step.on_timeout == "continue":
            output: dict[str, Any] = {"signal": None, "data": {}, "timed_out": True}
            return advance(plan, record, output, seen="timed out; going on")
        message = f"no signal {names} came within {step.timeout_s:g}s"
        err = timeout_of(record, "SIGNAL_TIMEOUT", message)
        return begin_failure(plan, record, Status.TIMED_OUT, err, "timed out")
    return hold(plan, record, until, first=False)


def hold(plan: Plan, record: FlowRecord, until: datetime | None, *, first: bool) -> FlowRecord:
    """The focused signal step waits: its next task is due at the timeout or the flow's
    deadline, whichever is first, at most ``MAX_SCHEDULE_AHEAD_S`` on; with neither it holds
    no task at all (a signal is what moves it)."""
    step = step_of(plan, record.position)
    assert isinstance(step, WaitForSignal)
    deadline = record.deadline_at
    ends = [t for t in (until, deadline) if t is not None]
    target = min(ends) if ends else None
    delay = (
        None if target is None else min((target - plan.now).total_seconds(), MAX_SCHEDULE_AHEAD_S)
    )
    waiting = f"waiting for signal {' or '.join(step.signals)}"
    entry = new_entry(plan, record, waiting, delay_s=delay)
    pos = record.position
    nxt = pos.model_copy(update={"poll": pos.poll + 1, "attempt": 0, "deferral": 0})
    logged = log(plan, record, entry, a_try=False) if first else record
    moved = move(plan, logged, Status.RUNNING).model_copy(update={"position": nxt})
    if delay is None:
        return moved.model_copy(update={"next": None})
    return with_next(moved, schedule(plan, moved, nxt, max(delay, 0.0)))


def waiting_names(record: FlowRecord, flow: Flow, kinds: Kinds) -> dict[str, tuple[str, ...]]:
    """The record's tracks that wait for a signal now (past their first task), by track key,
    with the names each waits for."""
    found = {}
    for key, track in record.tracks.items():
        pos = track.position
        if pos.kind is not TaskKind.SIGNAL or pos.poll == 0:
            continue
        step = kinds.container(flow, pos.scope).step(pos.step_index)
        if isinstance(step, WaitForSignal):
            found[key] = step.signals
    return found


def signal_steps(flow: Flow, kinds: Kinds) -> Iterator[tuple[str | None, WaitForSignal]]:
    """Every WaitForSignal of ``flow``, with the ForEach it is an item step of (None: the
    flow's own)."""
    for step in flow.steps:
        if isinstance(step, WaitForSignal):
            yield None, step
        inner = kinds.of(step).inner(step)
        if inner is not None:
            for inside in inner.steps:
                if isinstance(inside, WaitForSignal):
                    yield step.name, inside

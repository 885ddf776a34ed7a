"""A flow's history laid out on a time axis, for the console to draw.

Each history entry is a mark in its step's lane (compensations in a lane of their own,
operator actions in the operator lane) at the time it happened; a wait the planner chose (a
poll's backoff, a retry's) is a bar from the entry to when the next try was due, labelled
with the delay chosen and how it compares with the policy's curve (the jitter); a retry by an
operator starts a new generation, drawn as a boundary. Polls a poll chain ran that the
document has not recorded yet (read from the chain's task) are marks too, marked not written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from relayflow.core.backoff import nominal_delay
from relayflow.core.flows import Flow, PollPolicy
from relayflow.core.kinds import REGISTRY
from relayflow.core.position import TaskKind
from relayflow.core.records import FlowRecord, HistoryEntry
from relayflow.core.state import ACTIVE

OPERATOR_OUTCOMES = frozenset({"cancelled", "restarted", "reset"})
# What starts a new generation: an operator's retry, or reset to a step.
NEW_GENERATION = frozenset({"restarted", "reset"})
OPERATOR_LANE = "operator"  # the last lane: what people did, below what the flow did
TICK_STEPS_S = (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200)
MAX_TICKS = 8
X = Callable[[datetime], float]  # a time's place along the axis, 0..1


@dataclass(frozen=True)
class Wait:
    """A delay the planner chose after an entry: how long, and against which curve."""

    delay_s: float
    end_x: float
    curve_s: float | None = None  # the policy's delay before jitter (poll steps)
    jitter_s: float | None = None  # chosen - curve, when the jitter explains the difference

    @property
    def note(self) -> str:
        if self.curve_s is None:
            return ""
        if self.jitter_s is None:
            longer = self.delay_s > self.curve_s
            why = "a Retry-After asked for more" if longer else "cut to land on the deadline"
            return f"curve {self.curve_s:.2f}s; {why}"
        return f"curve {self.curve_s:.2f}s, jitter {self.jitter_s:+.2f}s"


@dataclass(frozen=True)
class Mark:
    """One history entry on the axis."""

    entry: HistoryEntry
    x: float  # 0..1 along the axis
    lane: int
    offset_s: float  # since the flow was created
    tone: str  # how it ended, for its colour: ok, wait, retry, fail, undo, op
    wait: Wait | None = None
    # False: a poll in flight, carried by its chain's task, not yet in the document's history.
    written: bool = True

    @property
    def which(self) -> str:
        """``poll 3``, ``action #1``, ``compensate #0``, ``sleep hop 1``."""
        if self.entry.kind is TaskKind.POLL:
            return f"poll {self.entry.poll}"
        if self.entry.kind is TaskKind.SLEEP:
            return f"sleep hop {self.entry.poll}"
        return f"{self.entry.kind} #{self.entry.attempt}"


@dataclass(frozen=True)
class Tick:
    x: float
    label: str


@dataclass(frozen=True)
class Timeline:
    start: datetime
    span_s: float
    lanes: list[str]
    marks: list[Mark]
    boundaries: list[Mark]  # the entries that began a new generation
    ticks: list[Tick]
    next_x: float | None  # when the next task is due, if the flow is active
    now_x: float | None


def build(
    record: FlowRecord,
    flow: Flow | None,
    *,
    now: datetime,
    in_flight: Sequence[HistoryEntry] = (),
) -> Timeline:
    """The timeline of ``record`` (``flow``, its definition if deployed, gives the curves),
    with the polls ``in_flight`` its chain ran that its history does not have yet."""
    start = record.created_at
    due = _next_due(record, in_flight)
    end = max([_end(record, now), *(e.at for e in in_flight[-1:]), *([due] if due else [])])
    span_s = max((end - start).total_seconds(), 1.0)

    def x(at: datetime) -> float:
        return min(max((at - start).total_seconds() / span_s, 0.0), 1.0)

    entries = [*record.history, *in_flight]
    named = dict.fromkeys(_lane_name(e) for e in entries)  # in order of appearance
    lanes = [lane for lane in named if lane != OPERATOR_LANE] + (
        [OPERATOR_LANE] if OPERATOR_LANE in named else []
    )
    marks = [_mark(e, lanes, x, start, flow) for e in record.history]
    marks += [replace(_mark(e, lanes, x, start, flow), written=False) for e in in_flight]
    active = record.status in ACTIVE
    return Timeline(
        start=start,
        span_s=span_s,
        lanes=lanes,
        marks=marks,
        boundaries=[m for m in marks if m.entry.outcome in NEW_GENERATION],
        ticks=_ticks(span_s),
        next_x=x(due) if active and due else None,
        now_x=x(now) if active else None,
    )


def _next_due(record: FlowRecord, in_flight: Sequence[HistoryEntry]) -> datetime | None:
    """When the flow's next task is due: the one its document names, or, with polls in
    flight, the one the newest of them waits for."""
    last = in_flight[-1] if in_flight else None
    if last is not None and last.delay_s is not None:
        return last.at + timedelta(seconds=last.delay_s)
    return record.next.run_at if record.next else None


def _end(record: FlowRecord, now: datetime) -> datetime:
    """The axis ends at the flow's end; while it runs, at now or its next task, if later."""
    times = [record.updated_at, *(e.at for e in record.history[-1:])]
    if record.finished_at is not None and record.status not in ACTIVE:
        times.append(record.finished_at)
    else:
        times += [now, *([record.next.run_at] if record.next else [])]
    return max(times)


def _mark(entry: HistoryEntry, lanes: list[str], x: X, start: datetime, flow: Flow | None) -> Mark:
    return Mark(
        entry=entry,
        x=x(entry.at),
        lane=lanes.index(_lane_name(entry)),
        offset_s=(entry.at - start).total_seconds(),
        tone=_tone(entry),
        wait=_wait(entry, x, flow),
    )


def _lane_name(entry: HistoryEntry) -> str:
    if entry.by or entry.outcome in OPERATOR_OUTCOMES:
        return OPERATOR_LANE
    if entry.kind is TaskKind.COMPENSATE:
        return f"undo {entry.step}"
    return entry.step


def _tone(entry: HistoryEntry) -> str:
    outcome = entry.outcome
    if entry.by or outcome in OPERATOR_OUTCOMES:
        return "op"
    if entry.kind is TaskKind.COMPENSATE:
        return "undo" if outcome == "compensated" else "fail"
    if outcome in ("succeeded", "ready"):
        return "ok"
    if outcome.startswith(("not ready", "sleeping until", "waiting for signal")):
        return "wait"
    if outcome == "woke":
        return "ok"
    if outcome.startswith("retryable error"):
        return "retry"
    return "fail"


def _wait(entry: HistoryEntry, x: X, flow: Flow | None) -> Wait | None:
    if entry.delay_s is None:
        return None
    end_x = x(entry.at + timedelta(seconds=entry.delay_s))
    curve = _curve_s(entry, flow)
    if curve is None:
        return Wait(entry.delay_s, end_x)
    jitter = entry.delay_s - curve
    allowed = _jitter_share(entry, flow) * curve + 0.001  # the history rounds to ms
    return Wait(entry.delay_s, end_x, curve, jitter if abs(jitter) <= allowed else None)


def _poll_policy(entry: HistoryEntry, flow: Flow | None) -> PollPolicy | None:
    """The backoff a poll's wait was drawn from (None: not a poll step's poll)."""
    index = flow.index_of(entry.step) if flow else None
    step = flow.step(index) if flow and index is not None else None
    if step is None or entry.kind is not TaskKind.POLL:
        return None
    return REGISTRY.of(step).policy(step)


def _curve_s(entry: HistoryEntry, flow: Flow | None) -> float | None:
    policy = _poll_policy(entry, flow)
    if policy is None:
        return None
    return nominal_delay(
        n=entry.poll,
        initial_s=policy.initial_s,
        multiplier=policy.multiplier,
        max_interval_s=policy.max_interval_s,
    )


def _jitter_share(entry: HistoryEntry, flow: Flow | None) -> float:
    policy = _poll_policy(entry, flow)
    return policy.jitter if policy else 0.0


def _ticks(span_s: float) -> list[Tick]:
    every = next((s for s in TICK_STEPS_S if span_s / s <= MAX_TICKS), span_s / MAX_TICKS)
    count = int(span_s // every)
    return [Tick(i * every / span_s, _offset(i * every)) for i in range(count + 1)]


def _offset(seconds: float) -> str:
    if seconds >= 3600:
        return f"+{seconds / 3600:g} h"
    if seconds >= 60:
        return f"+{seconds / 60:g} min"
    return f"+{seconds:g} s"

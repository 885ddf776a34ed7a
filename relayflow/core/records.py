"""The flow document (``flows/{flow_id}``) and its parts, as typed models.

The document is the whole truth about a flow: status, position, the task that must exist for it
to make progress (``next``), step outputs, a bounded history, and the result once terminal.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from relayflow.core.position import TASK_FLOW_PATTERN, Position, TaskKind
from relayflow.core.sharding import prefix_of
from relayflow.core.state import Status
from relayflow.core.tenants import DEFAULT_TENANT


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class HistoryEntry(_Model):
    """One thing that happened: a step try, a poll, a compensation, an operator action."""

    at: datetime
    generation: int = 0
    step: str
    kind: TaskKind
    attempt: int = 0
    poll: int = 0
    outcome: str
    detail: str = ""
    delay_s: float | None = None
    by: str = ""  # who did it, for an operator action (cancel, retry): the caller's identity
    # The bulk action an operator's action was part of (its id): a bulk action acts on a flow
    # at most once, and a batch run again after a crash finds what it did here. Left out when
    # empty (all but a bulk action's entries), so documents read and weigh as before.
    bulk: str = Field(default="", exclude_if=lambda bulk: not bulk)


class NextTask(_Model):
    """The task that must exist for the flow to progress; re-ensured on any doubt."""

    queue: str
    task_id: str
    run_at: datetime
    position: Position


class Result(_Model):
    """How a flow ended: ``{status, code, message, data | error}``."""

    status: Status
    code: str
    message: str
    data: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class Claim(_Model):
    """One delivery's lease on running the side effect at ``position`` until ``until``.

    Cloud Tasks may deliver a task twice at once, or again when a handler outlives its
    dispatch deadline; the claim makes the second delivery wait (a 409, retried later)
    instead of calling the external API a second time. It names its ``holder``: only the
    holder's commit lands, so a delivery that outlived its lease cannot overwrite the work of
    the one that took over. A holder whose commit failed ``released`` it, so the next delivery
    need not wait out the lease.

    A ``first`` claim was taken by the write that made the task (the flow's create), for the
    first dispatch of exactly that task (``planner.first_claims``): that delivery runs under
    it without a claim write of its own; any other delivery claims as usual.
    """

    position: Position
    until: datetime
    holder: str = ""
    released: bool = False
    first: bool = False


class EffectState(StrEnum):
    """What is known of one step's side effect."""

    UNKNOWN = "unknown"  # begun (claimed) and not known to have happened or not
    DONE = "done"  # the step completed
    UNDONE = "undone"  # its compensation completed
    UNDO_FAILED = "undo_failed"  # its compensation failed for good: it may still be live
    UNDO_PENDING = "undo_pending"  # an operator asked for it to be undone again (clean-up)
    REFUSED = "refused"  # its first try was refused for good: it never happened

    @property
    def live(self) -> bool:
        """Whether the effect may exist in the external system."""
        return self not in (EffectState.UNDONE, EffectState.REFUSED)


class Effect(_Model):
    """One side effect a step may have had, for the saga (DESIGN invariant 12).

    An effect is recorded when an action claims its position, before the external call, so a
    step whose every response was lost is still undone. ``n`` counts this step's earlier
    effects that are over (undone or refused); it names the idempotency key, so a retried flow
    replays an effect that may be live instead of making a second one, and makes a fresh one
    (under a fresh key) once the old one is gone.
    """

    step: str
    n: int = 0
    generation: int = 0
    state: EffectState = EffectState.UNKNOWN
    at: datetime
    done_at: datetime | None = None
    # What the action answered (when it did), and a ForEach item's item: its undo reads
    # them, wherever the undo runs (in the flow, after the lanes were gathered).
    output: dict[str, Any] | None = None
    item: Any = None
    # A callback step's token when it ran: its undo is told it (``ctx.callback_token``).
    token: str | None = None
    # A ChildFlow step's child (its key): undoing the step undoes that flow.
    child: str | None = None

    @property
    def order(self) -> datetime:
        """When it took effect, as far as anyone knows: compensation runs newest first."""
        return self.done_at or self.at


class FanOut(_Model):
    """A ForEach's items, run by ``lanes`` lanes (one document each, so items never contend
    for the flow document): lane k runs items k, k + lanes, k + 2·lanes … one at a time."""

    total: int
    lanes: int
    ended: list[int] = Field(default_factory=list)  # lanes that ran all their items
    failed: list[int] = Field(default_factory=list)  # indexes of items that failed for good


class Track(_Model):
    """One step running: its position, the task that must exist for it, its claim.

    A straight-line flow has one track at a time; steps that run in parallel have one each;
    a compensating flow has one, ``UNDO_TRACK``.
    """

    position: Position
    next: NextTask | None = None
    claim: Claim | None = None
    # Deliveries of this step that began (claimed) and never committed: crashed, timed out,
    # or their commit failed. They count toward the step's attempts (invariant 11).
    uncommitted: int = 0
    # Polls of this step that ended in a retryable error: they do not use up max_polls.
    poll_errors: int = 0
    started_at: datetime
    # A callback step's one-use token; what its run sent (visible to its safety-net check);
    # a completion that arrived before the run had committed, kept until it does.
    token: str | None = None
    sent: dict[str, Any] | None = None
    early: dict[str, Any] | None = None
    fanout: FanOut | None = None
    # A Sleep step's wake time, fixed once when its first task ran (``kinds.sleep``).
    wake_at: datetime | None = None
    # A WaitForSignal's timeout, fixed once when it began to wait, and the signals it waits
    # for (what status, the api and the console show) (``kinds.signal``).
    signal_until: datetime | None = None
    waiting_for: list[str] | None = None
    # A ChildFlow step's child flow, while it waits for it (its key; ``kinds.child``).
    child: str | None = None


class PendingSignal(_Model):
    """A signal sent to a flow before it reached the step that waits for it (``kinds.signal``):
    kept on the flow's document (a ForEach item's: on its lane's) until that step consumes it.
    ``item``: the ForEach item it is for (None: a step of the flow itself)."""

    name: str
    data: dict[str, Any] = Field(default_factory=dict)
    signal_id: str | None = None
    by: str = ""
    reason: str = ""
    at: datetime
    item: int | None = None


class ChildOf(_Model):
    """On a child flow's document: whose child it is, and the tasks its ends wake.

    ``key`` is the document to wake (the parent flow's, or its ForEach lane's);
    ``flow_id`` the parent flow's id (what ``relayflow list --parent`` lists by), ``step``
    its ChildFlow step (``scope``, ``item``: in a ForEach item), ``generation`` the parent's.
    ``wake``: the task the child's end makes for the parent (its name derives from the
    child's key, so a repeat is a no-op); ``undo``: set when the parent undoes the step, the
    task the end of the child's undo makes.
    """

    key: str = Field(pattern=TASK_FLOW_PATTERN)
    flow_id: str
    step: str
    scope: str | None = None
    item: int | None = None
    generation: int = 0
    wake: NextTask
    undo: NextTask | None = None


def flow_key(tenant: str, flow_id: str) -> str:
    """The key of tenant ``tenant``'s flow ``flow_id``: what its document, its tasks and its
    callback tokens are named by. Flow ids are each tenant's own (tenant B's ``order-42`` is
    not tenant A's); the default tenant's flows are keyed by their id."""
    return flow_id if tenant == DEFAULT_TENANT else f"{tenant}~{flow_id}"


def parent_spread(parent_key: str) -> str:
    """What a child of the flow keyed ``parent_key`` stores as ``parent_spread`` (and a list of
    its children asks): the key behind its hash prefix, so one parent's children sit together
    in the index while parents numbered in order spread over it."""
    return f"{prefix_of(parent_key)}:{parent_key}"


def split_key(key: str) -> tuple[str, str]:
    """The tenant and the flow id (or lane id, for a lane's key) that ``key`` names."""
    tenant, sep, rest = key.partition("~")
    return (tenant, rest) if sep else (DEFAULT_TENANT, key)


UNDO_TRACK = "~undo"
# The undo of a flow that has ended, retried on a long backoff until its window closes.
CLEANUP_TRACK = "~cleanup"


class CleanupState(StrEnum):
    """Where the undo of an ended flow's side effects is."""

    PENDING = "pending"  # an undo failed for a retryable reason: it is tried again until done
    DONE = "done"  # every effect it had to undo was undone
    ABANDONED = "abandoned"  # given up (its window closed, or an undo failed for good)


class Cleanup(_Model):
    """Undoing, after the flow has ended, what its compensation could not undo yet.

    A compensation that keeps failing for a retryable reason (its dependency is down, say) no
    longer holds the flow's end back or gives up: the flow ends at once, and the undo goes on
    as the flow's clean-up — on a long backoff that honours the dependency's breaker, newest
    effect first, until ``until`` (the undo window). Its state is in the document, the api,
    the CLI, the console and the result events.
    """

    state: CleanupState = CleanupState.PENDING
    since: datetime
    until: datetime
    # Failed tries of the undo now being retried (its long backoff's position).
    tries: int = 0
    finished_at: datetime | None = None
    # Effects whose undo was given up: they may still be live.
    left: list[str] = Field(default_factory=list)
    reason: str = ""
    by: str = ""  # the operator who asked for it, for an undo asked again
    # The task whose commit ended the flow and began the clean-up: a redelivery of it
    # publishes the result event its commit marked sent.
    from_position: Position | None = None


class Reset(_Model):
    """An operator's reset to ``step``: generation ``generation`` runs the flow again from
    that step (``planner.reset``).

    With ``undo`` it first undoes the effects in ``to_undo`` (names, newest first; each leaves
    the list once undone) on the undo track, the flow RUNNING; then it drops the outputs of
    ``rerun`` (an undo still reads them) and starts every step that is ready. Kept on the
    document for that generation: who reset it, why, to which step.
    """

    step: str
    generation: int
    undo: bool = True
    rerun: list[str] = Field(default_factory=list)
    to_undo: list[str] = Field(default_factory=list)
    by: str = ""
    reason: str = ""


ADMIT_TRACK = "~admit"  # a waiting flow's retry for a slot, once one has rested


class FlowRecord(_Model):
    """The Firestore document of one flow.

    ``tracks`` is the truth about what runs. The planner works on one track at a time: it
    ``focus``es on it, which copies the track into ``next``, ``claim``, ``uncommitted``,
    ``poll_errors`` and ``step_started_at`` (not stored), and stores them back into the track
    when it is done. A record with a single track is focused on it when it is read, so a
    straight-line flow reads as it always did. ``position`` (stored) is the position of the
    track last acted on: for an ended flow, where it ended.
    """

    flow_id: str = Field(pattern=TASK_FLOW_PATTERN)  # a flow's id, or a ForEach lane's
    flow: str
    # The definition version the flow started on; it runs to its end on that version.
    version: int = 1
    # Whose flow it is, and how urgent: high-priority tasks go to their own queues.
    tenant: str = "default"
    priority: str = "low"
    # What people find it by (the start message's ``labels``, ``relayflow.core.labels``): set
    # at its start and kept for good, across retries.
    labels: dict[str, str] = Field(default_factory=dict)
    # The dependency of the step that holds it up or ended it (``planner.dependency``): set
    # when a step is put off for its dependency's breaker or budget, and when the flow fails
    # at a step that names one; cleared when that step is done and when a run starts again.
    # What ``relayflow list --dependency`` lists by.
    dependency: str | None = None
    # The queue shard all of its tasks go to (QueueNames.for_kind), chosen from its key when
    # it was created and kept for good, so a later change of the count moves no flow; None:
    # written before queues had shards, shard 0 (the queue named as before).
    queue_shard: int | None = Field(default=None, ge=0)
    # "waiting": over its tenant's limits, it holds no task until a slot frees up (queued_at
    # orders the wait); "admitted": it runs, holding ``slot`` if its tenant is limited.
    admission: str = "admitted"
    queued_at: datetime | None = None
    slot: str | None = None
    input: dict[str, Any]
    status: Status
    position: Position
    tracks: dict[str, Track] = Field(default_factory=dict)
    # Steps a choice skipped (the branch not taken), in this generation.
    skipped: list[str] = Field(default_factory=list)
    outputs: dict[str, Any] = Field(default_factory=dict)
    deadline_at: datetime | None = None
    # The earliest next.run_at of the tracks, so the sweeper can query (status, next_run_at);
    # later if the sweeper set the flow aside (``aside_until``) until a new task is made.
    next_run_at: datetime | None = None
    aside_until: datetime | None = None
    history: list[HistoryEntry] = Field(default_factory=list)
    history_dropped: int = 0
    result: Result | None = None
    pending_result: Result | None = None
    result_published: bool = False
    # The undo that goes on after the flow's end (None: nothing was left to undo).
    cleanup: Cleanup | None = None
    # The operator's reset that started this generation, if one did (``Reset``).
    reset: Reset | None = None
    message_id: str | None = None
    polls: int = 0
    attempts: int = 0
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None
    # Set when the flow ends; a Firestore TTL policy (Terraform) deletes the doc after it.
    expire_at: datetime | None = None
    # The W3C traceparent of the flow's start, so every later task (retries, sweeper rescues,
    # operator actions) joins the flow's one trace. None when tracing was off at the start.
    trace: str | None = None
    effects: list[Effect] = Field(default_factory=list)
    # The ForEach lanes this generation made (their document ids), and whether their items'
    # effects were gathered here to be undone.
    lanes: list[str] = Field(default_factory=list)
    gathered: bool = False
    # Set on a lane's own document: whose lane it is, which ForEach, which lane, its items
    # ({index, item}), which of them it is at, each done item's output, those that failed, and
    # how many of those the flow has been told of.
    parent: str | None = None
    scope: str | None = None
    lane: int | None = None
    items: list[dict[str, Any]] = Field(default_factory=list)
    cursor: int = 0
    item_outputs: dict[str, Any] = Field(default_factory=dict)
    # Item outputs moved out of the document, a page object at a time (``core.payloads``):
    # each a payload reference to ``{index: output}``, and how many outputs they hold.
    item_pages: list[dict[str, Any]] = Field(default_factory=list)
    paged_items: int = 0
    failed_items: list[int] = Field(default_factory=list)
    reported_failures: int = 0
    # Signals sent before the flow reached the step that waits for them, oldest first, and
    # the ids of the latest signals taken (kept or consumed), so a resend is a no-op; both
    # bounded (``kinds.signal``).
    signals: list[PendingSignal] = Field(default_factory=list)
    signal_ids: list[str] = Field(default_factory=list)
    # Set on a child flow's document (``kinds.child``): its parent, and what its end wakes.
    child_of: ChildOf | None = None
    # The parent flow's key behind its hash prefix (``kinds.child.parent_spread``): what a
    # list of a parent's children asks, spread over its index as ``id_spread`` is.
    parent_spread: str | None = None
    # The focused track, copied (see the class docstring); never stored.
    focus: str | None = Field(default=None, exclude=True)
    step_started_at: datetime | None = Field(default=None, exclude=True)
    next: NextTask | None = Field(default=None, exclude=True)
    claim: Claim | None = Field(default=None, exclude=True)
    uncommitted: int = Field(default=0, exclude=True)
    poll_errors: int = Field(default=0, exclude=True)

    @model_validator(mode="after")
    def _focus_a_single_track(self) -> FlowRecord:
        if self.focus is None and len(self.tracks) == 1:
            key, track = next(iter(self.tracks.items()))
            self.__dict__.update(_copy_of(key, track))
        return self

    def focused(self, key: str) -> FlowRecord:
        """This record focused on track ``key`` (KeyError if there is none)."""
        return self.model_copy(update=_copy_of(key, self.tracks[key]))

    def stored(self) -> FlowRecord:
        """The focused track written back into ``tracks``, and ``next_run_at`` brought up to
        date: what a write stores."""
        tracks = dict(self.tracks)
        if self.focus is not None and self.focus in tracks:
            assert self.step_started_at is not None
            tracks[self.focus] = tracks[self.focus].model_copy(
                update={
                    "position": self.position,
                    "next": self.next,
                    "claim": self.claim,
                    "uncommitted": self.uncommitted,
                    "poll_errors": self.poll_errors,
                    "started_at": self.step_started_at,
                }
            )
        due = min((t.next.run_at for t in tracks.values() if t.next is not None), default=None)
        if due is not None and self.aside_until is not None:
            due = max(due, self.aside_until)
        written = self.model_copy(update={"tracks": tracks, "next_run_at": due})
        if len(tracks) == 1:  # as when read: a single track is in focus
            key, track = next(iter(tracks.items()))
            return written.model_copy(update=_copy_of(key, track))
        if self.focus is not None and self.focus not in tracks:
            return written.model_copy(update=_UNFOCUSED)
        return written

    def track_at(self, position: Position) -> str | None:
        """The key of the track at exactly ``position``, or None."""
        return next((k for k, t in self.tracks.items() if t.position == position), None)

    @property
    def key(self) -> str:
        """What the flow's document, tasks and tokens are named by (``flow_key``); a lane's
        id is its key."""
        return self.flow_id if self.is_lane else flow_key(self.tenant, self.flow_id)

    @property
    def cleaning(self) -> bool:
        """Whether the flow has ended and its clean-up still undoes effects."""
        return self.cleanup is not None and self.cleanup.state is CleanupState.PENDING

    @property
    def is_lane(self) -> bool:
        """Whether this is a ForEach lane's document rather than a flow's."""
        return self.parent is not None

    @property
    def item_index(self) -> int | None:
        """A lane's current item index (None past its last item, or for a flow)."""
        if not self.is_lane or self.cursor >= len(self.items):
            return None
        index: int = self.items[self.cursor]["index"]
        return index

    def live_effect(self, step: str) -> Effect | None:
        """The effect of ``step`` that may still exist, if any (there is at most one)."""
        return next((e for e in self.effects if e.step == step and e.state.live), None)

    def to_doc(self) -> dict[str, Any]:
        """The Firestore representation (datetimes stay datetimes)."""
        return self.stored().model_dump(mode="python", exclude_none=False)

    @classmethod
    def from_doc(cls, data: dict[str, Any]) -> FlowRecord:
        """Parse a Firestore document."""
        return cls.model_validate(data)


_UNFOCUSED: dict[str, Any] = {
    "focus": None,
    "next": None,
    "claim": None,
    "uncommitted": 0,
    "poll_errors": 0,
    "step_started_at": None,
}


def _copy_of(key: str, track: Track) -> dict[str, Any]:
    return {
        "focus": key,
        "position": track.position,
        "next": track.next,
        "claim": track.claim,
        "uncommitted": track.uncommitted,
        "poll_errors": track.poll_errors,
        "step_started_at": track.started_at,
    }

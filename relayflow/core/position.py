"""A flow's position (which step, which try) and the deterministic Cloud Tasks name for it.

A task carries the position it was created for; a handler acts only if that is still the flow's
current position (DESIGN invariant 4). The task id is derived from the position, so every
duplicate handler enqueues under the same name and Cloud Tasks deduplicates (invariant 3).
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

FLOW_ID_PATTERN = r"^[A-Za-z0-9_-]{1,100}$"
# A flow's key: what its document, tasks and tokens are named by. Flow ids are each tenant's
# own: the default tenant's flow is keyed by its id, another tenant's by ``{tenant}~{id}`` (a
# ``~`` never appears in a flow id or a tenant name; the tenant part is TENANT_PATTERN's).
_KEY = r"(?:[a-z0-9][a-z0-9-]{0,62}~)?[A-Za-z0-9_-]{1,100}"
FLOW_KEY_PATTERN = rf"^{_KEY}$"
# A ForEach lane's document: ``{key}.{step}.{lane}``, and ``.g{generation}`` after it when a
# retried flow ran its ForEach again (a dot never appears in a key).
_LANE = r"\.[a-z][a-z0-9_]{0,62}\.[0-9]{1,4}(?:\.g[0-9]{1,9})?"
LANE_ID_PATTERN = rf"^{_KEY}{_LANE}$"
TASK_FLOW_PATTERN = rf"^{_KEY}(?:{_LANE})?$"
STEP_NAME_PATTERN = r"^[a-z][a-z0-9_]{0,62}$"
MAX_TASK_ID = 500
_TASK_ID_OK = re.compile(r"^[A-Za-z0-9_-]{1,500}$")


def is_document_id(text: str) -> bool:
    """Whether Firestore takes ``text`` as a document id (it refuses ``__.*__``; ``.`` and
    ``..`` cannot match FLOW_ID_PATTERN)."""
    return not (len(text) >= 4 and text.startswith("__") and text.endswith("__"))


class TaskKind(StrEnum):
    """What a task does at its position."""

    ACTION = "action"
    POLL = "poll"
    COMPENSATE = "compensate"
    CHOICE = "choice"  # an If step deciding its branch: no side effect, no claim
    WAIT = "wait"  # a callback step waiting: its timeout, or its safety-net poll
    FANOUT = "fanout"  # a ForEach starting: its items listed, its lanes created
    JOIN = "join"  # a ForEach whose lanes have all ended: its items' outputs gathered, in order
    GATHER = "gather"  # before undoing: the ForEach lanes stopped, their items' effects collected
    ADMIT = "admit"  # a waiting flow tries for a slot again once one has rested
    SLEEP = "sleep"  # a Sleep step: its wake time fixed (hop 0), then each hop of its wait
    SIGNAL = "signal"  # a WaitForSignal: a signal kept looked for (0), then its timeout's hops
    CHILD = "child"  # a ChildFlow step starting its child flow
    CHILD_WAIT = "child_wait"  # a ChildFlow step awaiting its child's end (woken by it)
    CHILD_UNDO = "child_undo"  # a ChildFlow step's undo awaiting its child's undo


# One letter per kind in a task id (choice is "i", for If: "c" is a compensation).
_KIND_LETTER = {
    TaskKind.ACTION: "a",
    TaskKind.POLL: "p",
    TaskKind.COMPENSATE: "c",
    TaskKind.CHOICE: "i",
    TaskKind.WAIT: "w",
    TaskKind.FANOUT: "f",
    TaskKind.JOIN: "j",
    TaskKind.GATHER: "x",
    TaskKind.ADMIT: "m",
    TaskKind.SLEEP: "z",
    TaskKind.SIGNAL: "g",
    TaskKind.CHILD: "k",
    TaskKind.CHILD_WAIT: "n",
    TaskKind.CHILD_UNDO: "o",
}


# The tasks that check something outside and change nothing when it is not ready yet: a poll,
# a callback step's safety-net poll. They run as a chain (``core.planner.chain``): a not-ready
# answer makes the next poll's task without writing the flow's document, carrying what it saw.
CHAINED = frozenset({TaskKind.POLL, TaskKind.WAIT})
# How many polls run between two writes of a flow's document by default (the setting
# RELAYFLOW_POLL_CHAIN, ``Settings.poll_chain``): the chain's log rides in each task's body,
# and every POLL_CHAIN-th poll writes it to the history. 20, not 10: a poll step writes once
# per chain and once more when it ends, ceil(polls / POLL_CHAIN) in all, which is at most
# polls / 10 for every flow of 10 polls or more only if POLL_CHAIN >= 19 (a flow that makes
# 11 polls writes twice with chains of 10). Longer chains cost the sweeper time: it looks for
# a lost chain task once the whole chain should have run (``planner.chain.chain_end``).
POLL_CHAIN = 20
# The longest chain any setting may ask for. A task is current for a chain if it is at most
# this many polls past its flow's stored position (``Position.chains_to``), whatever the
# setting now is, so a deploy that shortens the chain does not strand the longer chains
# already queued. A task then carries at most MAX_POLL_CHAIN - 1 notes of at most ~600 bytes,
# 60 KB: Cloud Tasks takes tasks of up to 1 MB (https://cloud.google.com/tasks/docs/quotas).
MAX_POLL_CHAIN = 100
# What a carried note keeps of what a poll saw (a check's detail can be a remote body).
MAX_NOTE_CHARS = 500


class Position(BaseModel):
    """Where a flow is: generation, step, and the try within the step.

    ``attempt`` counts tries of an action (or compensation) after retryable errors; ``poll``
    counts polls of a poll step (and the hops of a sleep's wait: 0 fixes its wake time);
    ``rescue`` counts sweeper re-enqueues of a lost task.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    generation: int = Field(default=0, ge=0)
    step_index: int = Field(ge=0)
    step: str = Field(pattern=STEP_NAME_PATTERN)
    kind: TaskKind
    attempt: int = Field(default=0, ge=0)
    poll: int = Field(default=0, ge=0)
    rescue: int = Field(default=0, ge=0)
    # How often this try was put off (its tenant paused, its dependency's breaker open): a
    # new task name each time, and no attempt spent.
    deferral: int = Field(default=0, ge=0)
    # A ForEach item's step: the ForEach (``scope``) and the item's index in its list.
    scope: str | None = Field(default=None, pattern=STEP_NAME_PATTERN)
    item: int | None = Field(default=None, ge=0)
    # An ended flow's clean-up that an operator asked for again: its tries are named anew.
    undo_round: int = Field(default=0, ge=0)

    @model_serializer(mode="wrap")
    def _without_round_zero(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Left out when 0, so every position (documents, task bodies) reads as before and an
        # instance a rolling deploy has not reached yet still parses the task bodies.
        dumped: dict[str, Any] = handler(self)
        if not self.undo_round:
            dumped.pop("undo_round", None)
        return dumped

    @property
    def effect_name(self) -> str:
        """What names this step's effect: the step, or ``each[7].charge`` for an item's."""
        if self.scope is None:
            return self.step
        return f"{self.scope}[{self.item}].{self.step}"

    @property
    def undoing(self) -> bool:
        """Whether this task undoes its step's effect (a compensation)."""
        return self.kind is TaskKind.COMPENSATE

    @property
    def admitting(self) -> bool:
        """Whether this task is a waiting flow's try for a tenant slot (no step runs)."""
        return self.kind is TaskKind.ADMIT

    @property
    def joins(self) -> bool:
        """Whether this task joins a ForEach's lanes (all have ended)."""
        return self.kind is TaskKind.JOIN

    @property
    def gathers(self) -> bool:
        """Whether this task gathers a ForEach's item effects before its undo."""
        return self.kind is TaskKind.GATHER

    def as_action(self) -> Position:
        """This position's forward run (what an undo's action sent its key as)."""
        return self.model_copy(update={"kind": TaskKind.ACTION})

    def same_try(self, other: Position) -> bool:
        """Whether ``other`` is this try of this step, whatever its rescue and deferral numbers
        (a lost task re-made, or a put-off one, is not a new try)."""
        plain = {"rescue": 0, "deferral": 0}
        return self.model_copy(update=plain) == other.model_copy(update=plain)

    def chains_to(self, task: Position) -> bool:
        """Whether ``task`` is a later poll of the chain that begins at this (stored) position:
        the same step, try and rescue but for its poll number, at most ``MAX_POLL_CHAIN - 1``
        polls on (the longest chain a setting may make). Every poll after a chain's first
        follows a plain not-ready answer, so its position has no errors in a row (``attempt``)
        and no deferral, whatever the first had; a rescue, a cancel or a retry moves the
        stored position and so ends the chain."""
        if self.kind not in CHAINED or not self.poll < task.poll < self.poll + MAX_POLL_CHAIN:
            return False
        if task.attempt or task.deferral:
            return False
        plain = {"poll": 0, "attempt": 0, "deferral": 0}
        return self.model_copy(update=plain) == task.model_copy(update=plain)

    def at_poll(self, poll: int) -> Position:
        """The position of poll ``poll`` of this position's chain (see ``chains_to``)."""
        if poll == self.poll:
            return self
        return self.model_copy(update={"poll": poll, "attempt": 0, "deferral": 0})

    def label(self) -> str:
        """A short human-readable form, e.g. ``await_registration poll 3``."""
        if self.kind is TaskKind.POLL:
            return f"{self.effect_name} poll {self.poll}"
        if self.kind is TaskKind.SLEEP:
            return f"{self.effect_name} sleep hop {self.poll}"
        if self.kind is TaskKind.SIGNAL:
            return f"{self.effect_name} signal wait {self.poll}"
        return f"{self.effect_name} {self.kind} attempt {self.attempt}"


class PollNote(BaseModel):
    """One poll of a chain that its flow's document has not recorded yet: when it ran, what it
    saw, and how long it then waited (a history entry, less what the position says)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    at: datetime
    poll: int = Field(ge=0)
    attempt: int = Field(default=0, ge=0)  # the chain's first poll may follow errors
    seen: str = Field(max_length=MAX_NOTE_CHARS)
    delay_s: float = Field(ge=0)


class TaskPayload(BaseModel):
    """The JSON body of every relayflow task: whose flow, and the position it was made for.

    A poll chain's task also carries ``chain``: the polls since its flow's document was last
    written, one note each, oldest first, ending with the poll just before this one.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    flow_id: str = Field(pattern=TASK_FLOW_PATTERN)  # a flow's id, or a ForEach lane's
    position: Position
    chain: tuple[PollNote, ...] = Field(default=(), max_length=MAX_POLL_CHAIN - 1)

    @model_validator(mode="after")
    def _chain_leads_here(self) -> TaskPayload:
        if not self.chain:
            return self
        if self.position.kind not in CHAINED:
            raise ValueError(f"chain: a {self.position.kind} task carries no poll chain")
        polls = [note.poll for note in self.chain]
        first = self.position.poll - len(polls)
        if polls != list(range(first, self.position.poll)):
            raise ValueError(
                f"chain: polls {polls} do not lead to poll {self.position.poll} one by one"
            )
        return self

    @model_serializer(mode="wrap")
    def _without_empty_chain(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Left out when empty, so every other task's body reads as before.
        dumped: dict[str, Any] = handler(self)
        if not self.chain:
            dumped.pop("chain", None)
        return dumped


def split_effect_name(name: str) -> tuple[str | None, int | None, str]:
    """``each[7].charge`` -> ("each", 7, "charge"); ``charge`` -> (None, None, "charge")."""
    scope, sep, rest = name.partition("[")
    if not sep:
        return None, None, name
    item, _, step = rest.partition("].")
    return scope, int(item), step


def task_id(flow_id: str, position: Position) -> str:
    """The Cloud Tasks task id for a flow at a position.

    A hash prefix first: Google warns that sequential or timestamp-like prefixes slow every
    operation on a queue. The readable rest makes a task easy to find in a console.
    """
    p = position
    item = "" if p.scope is None else f"-s{p.scope}-i{p.item}"
    body = (
        f"{flow_id.replace('.', '-').replace('~', '-')}-{p.step_index}{p.step}{item}-"
        f"{_KIND_LETTER[p.kind]}"
        f"{p.attempt}-p{p.poll}-g{p.generation}r{p.rescue}"
        + (f"d{p.deferral}" if p.deferral else "")
        + (f"u{p.undo_round}" if p.undo_round else "")
    )
    # The raw key in the hash: a lane's dots and a tenant's ``~`` become dashes in the body,
    # and must not collide with a flow id that has dashes there.
    prefix = hashlib.sha256(f"{flow_id}|{body}".encode()).hexdigest()[:8]
    candidate = f"{prefix}-{body}"
    if len(candidate) <= MAX_TASK_ID and _TASK_ID_OK.match(candidate):
        return candidate
    # Unreachable for validated ids and steps; kept so a name is always legal and unique.
    return f"{prefix}-{hashlib.sha256(candidate.encode('utf-8')).hexdigest()}"

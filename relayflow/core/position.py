"""A flow's position (which step, which try) and the deterministic Cloud Tasks name for it.

A task carries the position it was created for; a handler acts only if that is still the flow's
current position (DESIGN invariant 4). The task id is derived from the position, so every
duplicate handler enqueues under the same name and Cloud Tasks deduplicates (invariant 3).
"""

from __future__ import annotations

import hashlib
import re
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

FLOW_ID_PATTERN = r"^[A-Za-z0-9_-]{1,100}$"
# A flow's key: what its document, tasks and tokens are named by. Flow ids are each tenant's
# own: the default tenant's flow is keyed by its id, another tenant's by ``{tenant}~{id}`` (a
# ``~`` never appears in a flow id or a tenant name; the tenant part is TENANT_PATTERN's).
_KEY = r"(?:[a-z0-9][a-z0-9-]{0,62}~)?[A-Za-z0-9_-]{1,100}"
FLOW_KEY_PATTERN = rf"^{_KEY}$"
# A ForEach lane's document: ``{key}.{step}.{lane}`` (a dot never appears in a key).
LANE_ID_PATTERN = rf"^{_KEY}\.[a-z][a-z0-9_]{{0,62}}\.[0-9]{{1,4}}$"
TASK_FLOW_PATTERN = rf"^{_KEY}(\.[a-z][a-z0-9_]{{0,62}}\.[0-9]{{1,4}})?$"
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
}


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

    def label(self) -> str:
        """A short human-readable form, e.g. ``await_registration poll 3``."""
        if self.kind is TaskKind.POLL:
            return f"{self.effect_name} poll {self.poll}"
        if self.kind is TaskKind.SLEEP:
            return f"{self.effect_name} sleep hop {self.poll}"
        return f"{self.effect_name} {self.kind} attempt {self.attempt}"


class TaskPayload(BaseModel):
    """The JSON body of every relayflow task: whose flow, and the position it was made for."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    flow_id: str = Field(pattern=TASK_FLOW_PATTERN)  # a flow's id, or a ForEach lane's
    position: Position


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

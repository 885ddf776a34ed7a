"""What relayflow keeps of each schedule: ``schedules/{name}`` (paused or not, the last tick
handled, the last runs), read and written by compare-and-set through the ScheduleStates port.

The document is small and bounded: MAX_RUNS runs, newest first. The schedule's declaration
(cron, flow, policies) is code, never stored: a deploy changes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol

# The runs a schedule's document keeps (newest first): what `schedules list` shows and where
# the overlap policy finds the previous run.
MAX_RUNS = 10


@dataclass(frozen=True)
class ScheduleRun:
    """One tick (or manual trigger) and what came of it.

    ``outcome``: started, duplicate (its flow existed: a tick run twice), skipped (overlap),
    rejected (the engine refused the start: ``note`` says why) or failed (the input function
    raised)."""

    flow_id: str
    outcome: str
    at: datetime  # when it was handled
    tick: datetime | None = None  # None: an operator's trigger
    note: str = ""
    by: str = ""

    @property
    def manual(self) -> bool:
        return self.tick is None

    @property
    def started(self) -> bool:
        """Whether a flow by this id runs (or ran) for it."""
        return self.outcome in ("started", "duplicate")

    def to_dict(self) -> dict[str, Any]:
        return {
            "flow_id": self.flow_id,
            "outcome": self.outcome,
            "at": self.at,
            "tick": self.tick,
            "note": self.note,
            "by": self.by,
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> ScheduleRun:
        return cls(
            flow_id=str(doc["flow_id"]),
            outcome=str(doc["outcome"]),
            at=doc["at"],
            tick=doc.get("tick"),
            note=str(doc.get("note", "")),
            by=str(doc.get("by", "")),
        )


@dataclass(frozen=True)
class ScheduleState:
    """A schedule's document. ``version``: the store's token for compare-and-set (None: no
    document yet); ``handled_to``: every tick up to it is handled (None: never ticked)."""

    name: str
    paused: bool = False
    by: str = ""
    reason: str = ""
    handled_to: datetime | None = None
    runs: tuple[ScheduleRun, ...] = ()
    missed: int = 0  # ticks dropped by the catch-up policy or a pause, all time
    version: Any = field(default=None, compare=False)

    def with_runs(self, runs: list[ScheduleRun]) -> ScheduleState:
        """This state with ``runs`` (oldest first) recorded, newest first, MAX_RUNS kept."""
        return replace(self, runs=(*reversed(runs), *self.runs)[:MAX_RUNS])

    def previous(self) -> ScheduleRun | None:
        """The newest run that started a flow: what the overlap policy looks at."""
        return next((run for run in self.runs if run.started), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "paused": self.paused,
            "by": self.by,
            "reason": self.reason,
            "handled_to": self.handled_to,
            "runs": [run.to_dict() for run in self.runs],
            "missed": self.missed,
        }

    @classmethod
    def from_dict(cls, name: str, doc: dict[str, Any], version: Any) -> ScheduleState:
        return cls(
            name=name,
            paused=bool(doc.get("paused")),
            by=str(doc.get("by", "")),
            reason=str(doc.get("reason", "")),
            handled_to=doc.get("handled_to"),
            runs=tuple(ScheduleRun.from_dict(r) for r in doc.get("runs", ())),
            missed=int(doc.get("missed", 0)),
            version=version,
        )


class ScheduleStates(Protocol):
    """Schedules' documents (Firestore ``schedules/{name}``; a dict in tests)."""

    def read(self, name: str) -> ScheduleState:
        """The schedule's document (a fresh state, version None, if there is none)."""
        ...

    def write(self, state: ScheduleState) -> bool:
        """Write ``state`` if the document is still at ``state.version`` (absent, for None);
        False, writing nothing, if another writer got there first."""
        ...

    def read_all(self) -> list[ScheduleState]:
        """Every schedule's document."""
        ...

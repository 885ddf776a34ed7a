"""What the engine's entry points answer: a start, a task's delivery, a callback, a sweep."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Started(StrEnum):
    """What a start message did."""

    STARTED = "started"
    DUPLICATE = "duplicate"
    REJECTED = "rejected"


@dataclass(frozen=True)
class StartResult:
    outcome: Started
    flow_id: str | None = None
    reason: str | None = None


class Ran(StrEnum):
    """What a task delivery did."""

    ADVANCED = "advanced"  # the flow moved on (or ended)
    STALE = "stale"  # not the flow's current position: a duplicate or late task, no-op
    BUSY = "busy"  # another delivery holds the position's claim: try again later (409)
    NO_FLOW = "no flow"  # no such flow document (it ended and expired, or never was): dropped


class Completion(StrEnum):
    """What completing a callback token did."""

    COMPLETED = "completed"  # the waiting step ended with it; the flow moved on
    KEPT = "kept"  # it came before the step's run had committed: kept, applied when it does
    IGNORED = "ignored"  # nothing awaited it (completed twice, late, an ended flow): no change


@dataclass(frozen=True)
class CallbackAnswer:
    outcome: Completion
    reason: str = ""
    flow_id: str | None = None


@dataclass
class SweepReport:
    """What a sweep found and did."""

    overdue: int = 0
    rescued: int = 0
    admitted: int = 0  # waiting flows given a slot
    ended: int = 0  # could never be settled: ended with a code that says why
    still_queued: int = 0
    unpublished: int = 0
    republished: int = 0
    errors: int = 0

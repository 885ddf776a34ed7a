"""The flow state machine (DESIGN invariant 6): the statuses and the only edges between them."""

from __future__ import annotations

from enum import StrEnum

from relayflow.core.errors import InvalidTransition


class Status(StrEnum):
    """Where a flow is in its life."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    COMPENSATING = "COMPENSATING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    TIMED_OUT = "TIMED_OUT"
    CANCELLED = "CANCELLED"


TERMINAL: frozenset[Status] = frozenset(
    {Status.SUCCEEDED, Status.FAILED, Status.TIMED_OUT, Status.CANCELLED}
)
ACTIVE: frozenset[Status] = frozenset({Status.PENDING, Status.RUNNING, Status.COMPENSATING})
# Ended flows that may still hold a task: while their clean-up undoes what they left live
# (a flow that succeeded, what its failed ForEach items left).
CLEANABLE: frozenset[Status] = TERMINAL

# Staying in the same status (progress within RUNNING, the next compensation) is not an edge;
# it is always allowed for non-terminal statuses. An operator's retry or reset to a step is the
# only way out of a failed end, and a reset the only way out of a succeeded one: each starts a
# new generation.
EDGES: dict[Status, frozenset[Status]] = {
    Status.PENDING: frozenset({Status.RUNNING, Status.CANCELLED}),
    Status.RUNNING: frozenset(
        {
            Status.SUCCEEDED,
            Status.FAILED,
            Status.TIMED_OUT,
            Status.CANCELLED,
            Status.COMPENSATING,
        }
    ),
    # A cancel compensates first, then ends CANCELLED. (An operator cannot cancel a flow that
    # is already compensating: planner.cancel refuses, so undoing is never left half done.)
    Status.COMPENSATING: frozenset({Status.FAILED, Status.TIMED_OUT, Status.CANCELLED}),
    Status.SUCCEEDED: frozenset({Status.PENDING}),
    Status.FAILED: frozenset({Status.PENDING}),
    Status.TIMED_OUT: frozenset({Status.PENDING}),
    Status.CANCELLED: frozenset({Status.PENDING}),
}


def is_allowed(current: Status, target: Status) -> bool:
    """Whether ``current -> target`` is an edge (or a non-terminal status staying put)."""
    if current == target:
        return current not in TERMINAL
    return target in EDGES[current]


def check_transition(current: Status, target: Status) -> None:
    """Raise InvalidTransition unless ``current -> target`` is allowed."""
    if not is_allowed(current, target):
        raise InvalidTransition(f"illegal transition {current} -> {target}")


def path_to(current: Status, target: Status) -> list[Status]:
    """The statuses a task outcome passes through, checked hop by hop.

    The first task of a flow finds it PENDING and may end it outright (a one-step flow that
    succeeds); that is PENDING -> RUNNING -> target, never a direct PENDING -> SUCCEEDED.
    """
    hops = [target]
    if current is Status.PENDING and target is not Status.CANCELLED:
        hops = [Status.RUNNING, target] if target is not Status.RUNNING else [target]
    previous = current
    for hop in hops:
        check_transition(previous, hop)
        previous = hop
    return hops

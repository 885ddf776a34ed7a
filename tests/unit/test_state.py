"""relayflow.core.state: every (current, target) pair against an explicit table of legal edges."""

from __future__ import annotations

import itertools

import pytest

from relayflow.core.errors import InvalidTransition
from relayflow.core.state import ACTIVE, TERMINAL, Status, check_transition, is_allowed, path_to

P, R, C = Status.PENDING, Status.RUNNING, Status.COMPENSATING
S, F, T, X = Status.SUCCEEDED, Status.FAILED, Status.TIMED_OUT, Status.CANCELLED

# Written out by hand from DESIGN invariant 6, not derived from relayflow.core.state.EDGES.
LEGAL: frozenset[tuple[Status, Status]] = frozenset(
    {
        (P, P), (P, R), (P, X),
        (R, R), (R, C), (R, S), (R, F), (R, T), (R, X),
        (C, C), (C, F), (C, T), (C, X),
        (F, P), (T, P), (X, P),
        (S, P),  # an operator's reset to a step runs a succeeded flow again
    }
)  # fmt: skip
ALL_PAIRS = list(itertools.product(Status, repeat=2))


def test_there_are_seven_statuses_split_into_active_and_terminal() -> None:
    assert len(Status) == 7
    assert {P, R, C} == ACTIVE
    assert {S, F, T, X} == TERMINAL


@pytest.mark.parametrize(("current", "target"), sorted(LEGAL))
def test_a_legal_transition_is_allowed(current: Status, target: Status) -> None:
    assert is_allowed(current, target)
    check_transition(current, target)  # does not raise


@pytest.mark.parametrize(("current", "target"), [p for p in ALL_PAIRS if p not in LEGAL])
def test_an_illegal_transition_raises(current: Status, target: Status) -> None:
    assert not is_allowed(current, target)
    with pytest.raises(InvalidTransition, match=f"{current} -> {target}"):
        check_transition(current, target)


@pytest.mark.parametrize(
    ("target", "hops"),
    [
        (R, [R]),
        (S, [R, S]),
        (F, [R, F]),
        (T, [R, T]),
        (C, [R, C]),
        (X, [X]),
    ],
)
def test_path_from_pending_goes_through_running_except_to_cancel(
    target: Status, hops: list[Status]
) -> None:
    assert path_to(P, target) == hops


@pytest.mark.parametrize(
    ("current", "target"), [(R, S), (R, C), (C, F), (C, T), (F, P), (X, P), (T, P), (S, P)]
)
def test_path_between_neighbours_is_the_single_hop(current: Status, target: Status) -> None:
    assert path_to(current, target) == [target]


@pytest.mark.parametrize(
    ("current", "target"), [(S, R), (S, F), (F, R), (C, R), (C, S), (X, X), (T, F)]
)
def test_path_refuses_an_illegal_transition(current: Status, target: Status) -> None:
    with pytest.raises(InvalidTransition):
        path_to(current, target)

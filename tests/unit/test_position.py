"""position.task_id: legal, short, hash-prefixed, unique per position, deterministic."""

from __future__ import annotations

import itertools
import re

import pytest

from relayflow.core.position import MAX_TASK_ID, Position, TaskKind, TaskPayload, task_id

LEGAL = re.compile(r"^[A-Za-z0-9_-]+$")
BASE = Position(step_index=1, step="await_registration", kind=TaskKind.POLL)


def _prefix(name: str) -> str:
    return name.split("-", 1)[0]


@pytest.mark.parametrize(
    "flow_id",
    ["a", "acme-1", "-lead", "trail-", "__x__", "X" * 100, "12345678901234", "a_b-C_d"],
)
def test_a_task_id_is_legal_bounded_and_starts_with_an_eight_hex_hash(flow_id: str) -> None:
    name = task_id(flow_id, BASE)
    assert LEGAL.match(name)
    assert len(name) <= MAX_TASK_ID
    assert re.match(r"^[0-9a-f]{8}-", name)


def test_the_longest_flow_id_and_step_name_still_fit() -> None:
    position = Position(
        generation=10**9, step_index=10**6, step="s" * 63, kind=TaskKind.COMPENSATE, attempt=10**6
    )
    name = task_id("Z" * 100, position.model_copy(update={"poll": 10**6, "rescue": 10**6}))
    assert LEGAL.match(name) and len(name) <= MAX_TASK_ID


@pytest.mark.parametrize(
    "change",
    [
        {"generation": 1},
        {"step_index": 2},
        {"attempt": 1},
        {"poll": 1},
        {"rescue": 1},
        {"kind": TaskKind.ACTION},
        {"kind": TaskKind.COMPENSATE},
        {"step": "await_other"},
    ],
)
def test_every_differing_position_field_gives_a_different_name(change: dict[str, object]) -> None:
    # given the same flow at two positions that differ in one field
    other = BASE.model_copy(update=change)
    # then the names differ, in the hash prefix too
    assert task_id("acme-1", other) != task_id("acme-1", BASE)
    assert _prefix(task_id("acme-1", other)) != _prefix(task_id("acme-1", BASE))


def test_positions_whose_numbers_could_run_together_are_still_distinct() -> None:
    # attempt 1 poll 11 vs attempt 11 poll 1, generation 1 rescue 11 vs 11 / 1, etc.
    positions = [
        BASE.model_copy(update={"attempt": a, "poll": p, "generation": g, "rescue": r})
        for a in (1, 11)
        for p in (1, 11)
        for g in (1, 11)
        for r in (1, 11)
    ]
    names = {task_id("acme-1", p) for p in positions}
    assert len(names) == len(positions)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("acme", "Acme"),  # differ only in case
        ("acme-", "acme"),  # trailing hyphen
        ("-acme", "acme"),  # leading hyphen
        ("acme_1", "acme-1"),  # underscore vs hyphen
        ("a" * 100, "a" * 99 + "b"),  # long ids differing in the last character
        ("1234567890", "1234567891"),  # numeric Pub/Sub message ids
        ("acme-1", "acme-1-1await_registration-p0-p0-g0r0"),  # one id embedding another's tail
    ],
)
def test_odd_flow_ids_get_distinct_names(one: str, other: str) -> None:
    assert task_id(one, BASE) != task_id(other, BASE)


def test_a_task_id_is_deterministic() -> None:
    assert task_id("acme-1", BASE) == task_id("acme-1", BASE.model_copy())


def test_sequential_flow_ids_get_spread_hash_prefixes() -> None:
    # given flows numbered like Pub/Sub message ids, in order
    prefixes = [_prefix(task_id(str(10_000 + i), BASE)) for i in range(200)]
    # then their prefixes are not in sequential order and cover the key space
    assert prefixes != sorted(prefixes)
    assert len({p[0] for p in prefixes}) == 16
    neighbours_sharing_a_first_char = sum(a[0] == b[0] for a, b in itertools.pairwise(prefixes))
    assert neighbours_sharing_a_first_char < 40  # ~1/16 of 199 expected; sequential would be ~all


def test_a_position_label_is_readable() -> None:
    assert BASE.model_copy(update={"poll": 3}).label() == "await_registration poll 3"
    action = Position(step_index=0, step="register", kind=TaskKind.ACTION, attempt=2)
    assert action.label() == "register action attempt 2"


def test_a_task_payload_refuses_a_flow_id_that_cannot_name_a_task() -> None:
    with pytest.raises(ValueError, match="flow_id"):
        TaskPayload(flow_id="a/b", position=BASE)

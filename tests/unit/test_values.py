"""relayflow.core.values: what may go into a flow document — JSON Firestore stores, within its
depth and field-path limits and a size bound — and, when not, a reason that says where."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

import pytest

from relayflow.core.messages import MAX_INPUT_BYTES
from relayflow.core.values import MAX_DEPTH, UnstorableValue, check_storable


def test_long_keys_within_the_field_limit_are_fine() -> None:
    check_storable({"a" * 600: {"b" * 600: 1}}, where="input", max_bytes=MAX_INPUT_BYTES)


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"k": value}
    return value


def test_json_of_every_kind_is_storable() -> None:
    value = {"s": "é", "i": -(2**63), "f": 1.5, "b": True, "n": None, "l": [1, {"x": []}]}
    check_storable(value, where="output", max_bytes=1024)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({"a": [1, {"b": {1, 2}}]}, r"output\.a\[1\]\.b is a set, not a JSON value"),
        ({"at": datetime(2026, 1, 1, tzinfo=UTC)}, r"output\.at is a datetime"),
        ({"raw": b"x"}, r"output\.raw is a bytes"),
        ({"x": math.nan}, r"output\.x is nan, not a finite number"),
        ({"x": -math.inf}, r"output\.x is -inf, not a finite number"),
        ({"x": 2**63}, r"output\.x is an integer outside 64 bits"),
        ({"x": "a\udc80b"}, r"output\.x contains a lone surrogate"),
        ({1: "one"}, r"output has a key that is not a non-empty string: 1"),
        ({"": "empty"}, r"output has a key that is not a non-empty string: ''"),
        ({"__name__": 1}, r"output has a reserved key '__name__' \(Firestore refuses __\*__\)"),
    ],
    ids=[
        "set", "datetime", "bytes", "nan", "inf", "int65", "surrogate", "int-key", "empty-key",
        "reserved-key",
    ],
)  # fmt: skip
def test_a_value_firestore_would_refuse_is_named_with_where_it_is(value: Any, says: str) -> None:
    with pytest.raises(UnstorableValue, match=says):
        check_storable(value, where="output", max_bytes=1024)


def test_a_value_may_nest_as_deep_as_the_limit_and_no_deeper() -> None:
    check_storable(nested(MAX_DEPTH), where="output", max_bytes=1024)
    with pytest.raises(UnstorableValue, match=f"nests deeper than {MAX_DEPTH} levels"):
        check_storable(nested(MAX_DEPTH + 1), where="output", max_bytes=1024)


def test_a_value_is_bounded_by_its_size_as_json() -> None:
    value = {"blob": "é" * 10}
    size = len(json.dumps(value, ensure_ascii=False).encode("utf-8"))
    check_storable(value, where="output", max_bytes=size)
    with pytest.raises(UnstorableValue, match=f"output is {size} bytes; the limit is {size - 1}"):
        check_storable(value, where="output", max_bytes=size - 1)

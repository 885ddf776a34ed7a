"""What may go into a flow document: JSON that Firestore can store, of bounded size.

Start inputs and step outputs are checked here before they are written, so a value Firestore
would refuse ends the flow (or the message) with a clear reason instead of failing the write on
every redelivery.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from typing import Any

MAX_DEPTH = 16  # Firestore allows 20 levels of maps and arrays; leave room for the envelope
# Firestore refuses a field path (the map keys from the document's root, dot-joined) over
# 1,500 bytes: https://cloud.google.com/firestore/quotas#collections_documents_and_fields.
# The value's own keys get what its place in the document (``outputs.<step>`` and the like)
# leaves of that, with room to spare.
MAX_FIELD_PATH_BYTES = 1500 - 200
_RESERVED_KEY = re.compile(r"^__.*__$")
_INT64 = (-(2**63), 2**63 - 1)


def nodes(value: Any, *, stop: Callable[[Any], bool] = lambda value: False) -> Iterator[Any]:
    """Every value in a JSON tree, ``value`` first: objects' values and lists' items, not
    inside those ``stop`` says to stop at."""
    yield value
    if stop(value):
        return
    if isinstance(value, dict):
        for item in value.values():
            yield from nodes(item, stop=stop)
    elif isinstance(value, list):
        for item in value:
            yield from nodes(item, stop=stop)


class UnstorableValue(ValueError):
    """Raised when a value cannot be stored in a flow document; the message says where and why."""


def check_storable(value: Any, *, where: str, max_bytes: int) -> None:
    """Raise UnstorableValue unless ``value`` is storable JSON of at most ``max_bytes``."""
    _check(value, where, 0, 0)
    size = len(json.dumps(value, ensure_ascii=False).encode("utf-8"))
    if size > max_bytes:
        raise UnstorableValue(f"{where} is {size} bytes; the limit is {max_bytes}")


def _check(value: Any, where: str, depth: int, path_bytes: int) -> None:
    """``path_bytes``: how long the field path to ``value`` is already (keys and dots)."""
    if depth > MAX_DEPTH:
        raise UnstorableValue(f"{where} nests deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        for key, item in value.items():
            size = path_bytes + _check_key(key, where, path_bytes) + (1 if path_bytes else 0)
            _check(item, f"{where}.{str(key)[:80]}", depth + 1, size)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check(item, f"{where}[{i}]", depth + 1, path_bytes)
    else:
        _check_scalar(value, where)


def _check_key(key: object, where: str, path_bytes: int) -> int:
    """Raise unless Firestore stores ``key`` as a field name here; its size in bytes."""
    if not isinstance(key, str) or not key:
        raise UnstorableValue(f"{where} has a key that is not a non-empty string: {key!r}"[:300])
    if _RESERVED_KEY.match(key):
        shown = ascii(key)[:80]
        raise UnstorableValue(f"{where} has a reserved key {shown} (Firestore refuses __*__)")
    _check_text(key, f"{where} key {ascii(key)[:80]}")
    size = len(key.encode("utf-8"))
    if path_bytes + size > MAX_FIELD_PATH_BYTES:
        raise UnstorableValue(
            f"{where} has a key {ascii(key)[:40]}… of {size} bytes: Firestore stores a field "
            f"path of at most 1,500 bytes, and keys here may take {MAX_FIELD_PATH_BYTES}"
        )
    return size


def _check_scalar(value: Any, where: str) -> None:
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if not _INT64[0] <= value <= _INT64[1]:
            raise UnstorableValue(f"{where} is an integer outside 64 bits")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise UnstorableValue(f"{where} is {value}, not a finite number")
    elif isinstance(value, str):
        _check_text(value, where)
    else:
        raise UnstorableValue(f"{where} is a {type(value).__name__}, not a JSON value")


def _check_text(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise UnstorableValue(f"{where} contains a lone surrogate, not valid Unicode") from None

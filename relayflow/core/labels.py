"""Labels: what a publisher tags a flow with so that people can find it again by the business's
own words (``{"order_id": "123"}``: "the flows for order 123").

A start message may carry up to ``MAX_LABELS`` labels, string keys and values, bounded like
Google Cloud's resource labels: a key is a lowercase name (``[a-z][a-z0-9_-]{0,62}``), a value
1..63 characters. Values admit more than Google's lowercase set (``[A-Za-z0-9_.@:/+-]``): the ids
support searches by are the business's own (``ORD-2026/123``, ``jane@example.com``), and folding
their case would make an exact search miss; they exclude what the filter syntax needs (``=``
between key and value, ``,`` and spaces between labels). Labels are kept on the flow document
for good (a retry keeps them), shown by the api, the CLI and the console, carried on the result
event, and filtered on with ``key=value`` (``relayflow list --label order_id=123``).

A flow's labels are indexed as ``key=value`` strings (``entry``): one array the store can ask
"contains" of, so one index serves every key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated

from pydantic import Field, StringConstraints

MAX_LABELS = 16
KEY_PATTERN = r"^[a-z][a-z0-9_-]{0,62}$"
VALUE_PATTERN = r"^[A-Za-z0-9_.@:/+-]{1,63}$"
SEPARATOR = "="

LabelKey = Annotated[str, StringConstraints(pattern=KEY_PATTERN)]
LabelValue = Annotated[str, StringConstraints(pattern=VALUE_PATTERN)]
# A start message's ``labels``; its JSON Schema refuses any key the pattern does not admit.
Labels = Annotated[
    dict[LabelKey, LabelValue],
    Field(max_length=MAX_LABELS, json_schema_extra={"additionalProperties": False}),
]


class InvalidLabel(ValueError):
    """Raised when a ``key=value`` label (a filter, a CLI argument) is not one a flow can carry."""


def problem(key: str, value: str) -> str:
    """Why ``key``/``value`` cannot be a label, or ''."""
    if not re.fullmatch(KEY_PATTERN, key):
        return f"label key {key[:80]!r} must match {KEY_PATTERN}"
    if not re.fullmatch(VALUE_PATTERN, value):
        return f"label {key}'s value {value[:80]!r} must match {VALUE_PATTERN}"
    return ""


def parse(text: str) -> tuple[str, str]:
    """``key=value`` as its key and value; InvalidLabel saying what is wrong."""
    key, sep, value = text.strip().partition(SEPARATOR)
    if not sep:
        raise InvalidLabel(f"label {text[:80]!r} must be key=value, e.g. order_id=123")
    found = problem(key, value)
    if found:
        raise InvalidLabel(found)
    return key, value


def parse_all(texts: list[str], *, most: int = MAX_LABELS) -> dict[str, str]:
    """Several ``key=value`` labels (each key once), in order; InvalidLabel if one is not a
    label, a key repeats, or there are more than ``most``."""
    if len(texts) > most:
        raise InvalidLabel(f"at most {most} labels, got {len(texts)}")
    found: dict[str, str] = {}
    for text in texts:
        key, value = parse(text)
        if key in found:
            raise InvalidLabel(f"label {key!r} is given twice ({found[key]!r}, {value!r})")
        found[key] = value
    return found


def entry(key: str, value: str) -> str:
    """The indexed form of one label: ``key=value`` (a key has no ``=``, so it is unambiguous)."""
    return f"{key}{SEPARATOR}{value}"


def entries(labels: Mapping[str, str]) -> list[str]:
    """A flow's labels in their indexed form, in key order."""
    return [entry(k, labels[k]) for k in sorted(labels)]


def shown(labels: Mapping[str, str]) -> str:
    """Labels as one line: ``order_id=123 region=eu`` (in key order)."""
    return " ".join(entries(labels))

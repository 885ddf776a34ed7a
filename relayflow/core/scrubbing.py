"""Scrubbing: sensitive values a request has opened kept out of the text it writes elsewhere.

A handler's error message, a poll's not-ready detail, a log line may quote a value the handler
was given in clear (``PermanentError(f"card {number} declined")``). Every value opened for a
handler is noted for the request (``revealing`` scopes it to one task or one start); what goes
to the history, the result's error, a poll chain's task body, a span's status and the logs is
then ``scrubbed``: each noted value replaced by ``[redacted]``.

Values shorter than ``MIN_CHARS`` are not scrubbed: replacing every "1" or "yes" in a line
would hide more than it protects. Only text is scrubbed: a value a handler copies into an
unmarked output field is stored as it is (mark that field too).
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from relayflow.core.values import nodes

REDACTED = "[redacted]"
MIN_CHARS = 4

_REVEALED: contextvars.ContextVar[set[str] | None] = contextvars.ContextVar(
    "relayflow_revealed", default=None
)


@contextmanager
def revealing() -> Iterator[None]:
    """A scope (one task, one start) whose opened values are scrubbed from its text; inside
    one already, that one (what is opened in it is scrubbed from all of its text)."""
    if _REVEALED.get() is not None:
        yield
        return
    token = _REVEALED.set(set())
    try:
        yield
    finally:
        _REVEALED.reset(token)


def reveal(value: Any) -> None:
    """Note the clear values in ``value`` (any JSON) for the current scope (none: nothing)."""
    noted = _REVEALED.get()
    if noted is not None:
        noted.update(_texts(value))


def revealed() -> frozenset[str]:
    """The values noted in the current scope."""
    return frozenset(_REVEALED.get() or ())


def scrubbed(text: str, values: Iterable[str] | None = None) -> str:
    """``text`` with each noted value (or each of ``values``) replaced by ``[redacted]``."""
    shown = revealed() if values is None else values
    for value in sorted(shown, key=len, reverse=True):  # a longer value before its parts
        if value in text:
            text = text.replace(value, REDACTED)
    return text


def scrubbed_json(line: str) -> str:
    """A JSON line (a log entry) with each noted value replaced, as it is escaped there too."""
    values = revealed()
    if not values:
        return line
    escaped = {json.dumps(v, ensure_ascii=False)[1:-1] for v in values}
    ascii_escaped = {json.dumps(v)[1:-1] for v in values}
    return scrubbed(line, values | escaped | ascii_escaped)


def _texts(value: Any) -> Iterator[str]:
    for node in nodes(value):
        if isinstance(node, str | int | float) and not isinstance(node, bool):
            shown = str(node)
            if len(shown) >= MIN_CHARS:
                yield shown

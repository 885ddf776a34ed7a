"""Reading what callers send the api and the console: query parameters, form fields, route
segments and bodies.

Every value is checked here, at the boundary, and refused with a message that names the
parameter and what it must be (the routes answer 400 with it). Nothing a caller sends may
reach Firestore or a parser unchecked: a value Firestore refuses (a reserved id, a time
outside its range) or a parser chokes on (a 5,000-digit number, 100,000 nested brackets)
would otherwise be a 500, which any viewer could raise at will and the 5xx alert would page on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from relayflow.core import labels as label_rules
from relayflow.core.breaker_policy import DEPENDENCY_PATTERN
from relayflow.core.dead_letters import DeadLetter
from relayflow.core.errors import InvalidMessage, RelayflowError
from relayflow.core.listing import (
    Cursor,
    FlowFilter,
    InvalidCursor,
    OutOfRange,
    in_utc,
)
from relayflow.core.messages import StartMessage, decode_json, describe
from relayflow.core.position import FLOW_ID_PATTERN, STEP_NAME_PATTERN, is_document_id
from relayflow.core.records import flow_key
from relayflow.core.signal_messages import shape_problem
from relayflow.core.state import Status
from relayflow.core.tenants import DEFAULT_TENANT, TENANT_PATTERN

FLOW_NAME = re.compile(r"[a-z][a-z0-9_-]{0,62}")
STEP_NAME = re.compile(STEP_NAME_PATTERN)
# ASCII digits only: str.isdigit() admits "²", which int() refuses, and int() refuses more
# than 4,300 digits; seven digits bound every number a parameter here may be.
SMALL_NUMBER = re.compile(r"[0-9]{1,7}")
MAX_LIMIT = 500
MAX_TIME_CHARS = 64
FIRST, LAST = "0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z"  # listing.EARLIEST, LATEST
# A callback token is ``{flow or lane key}.{40 hex}`` (a key: ``[{tenant}~]{id}``): at most
# 274 characters of these.
CALLBACK_TOKEN = re.compile(r"[A-Za-z0-9_.~-]{1,300}")
MAX_REASON_CHARS = 500
MAX_MESSAGE_ID = 200
MAX_REPLAY_BYTES = 256 * 1024
VIEWS = ("summary", "full")
# A result code as the engine stores it (bounded to 100 characters: planner.history.error_of).
MAX_CODE_CHARS = 100
# Labels a filter takes: ``label=k=v`` repeated, or several in one, spaces or commas between.
LABEL_SEPARATORS = re.compile(r"[\s,]+")


class BadRequest(RelayflowError):
    """Raised when a parameter or field is missing or not what it must be."""


class PayloadTooLarge(RelayflowError):
    """Raised when what a request asks to be shown is larger than the api answers with."""


class UnsupportedMediaType(RelayflowError):
    """Raised when a body is not sent as the JSON it must be (``Content-Type``)."""


@dataclass(frozen=True)
class ListQuery:
    """A list request: which flows, which page, how much of each."""

    filter: FlowFilter
    after: Cursor | None
    limit: int
    view: str


def flow_id(text: str) -> str:
    if not re.fullmatch(FLOW_ID_PATTERN[1:-1], text):
        raise BadRequest(f"flow id must match {FLOW_ID_PATTERN}")
    if not is_document_id(text):
        raise BadRequest("flow id must not start and end with __ (Firestore reserves those ids)")
    return text


def message_id(text: str) -> str:
    if not text or len(text) > MAX_MESSAGE_ID or not text.isprintable():
        raise BadRequest(f"message id must be 1..{MAX_MESSAGE_ID} printable characters")
    return text


def list_query(args: Mapping[str, str], *, default_limit: int = 50) -> ListQuery:
    """Filters, cursor, limit and view from a list request's parameters."""
    view = args.get("view") or "summary"
    if view not in VIEWS:
        raise BadRequest(f"view must be one of {', '.join(VIEWS)}, got {view[:40]!r}")
    return ListQuery(
        filter=flow_filter(args),
        after=cursor(args.get("cursor")),
        limit=limit(args.get("limit"), default=default_limit),
        view=view,
    )


# The parameters ``flow_filter`` reads: a list's, a count's and a bulk action's filter.
FILTER_FIELDS = (
    "flow",
    "status",
    "version",
    "tenant",
    "updated_from",
    "updated_to",
    "parent",
    "label",
    "code",
    "dependency",
)


def flow_filter(args: Mapping[str, str]) -> FlowFilter:
    """``flow``, ``status``, ``version``, ``tenant``, ``updated_from`` and ``updated_to``,
    ``parent``, ``label`` (repeatable: all of them), ``code`` and ``dependency``; empty is
    unset."""
    window = (timestamp(args, "updated_from"), timestamp(args, "updated_to"))
    if window[0] and window[1] and window[0] >= window[1]:
        raise BadRequest("updated_from must be before updated_to")
    return FlowFilter(
        flow=flow_name(args.get("flow")),
        status=status(args.get("status")),
        version=version(args.get("version")),
        tenant=tenant(args.get("tenant")),
        updated_from=window[0],
        updated_to=window[1],
        parent=parent(args.get("parent"), args.get("tenant")),
        labels=labels(_every(args, "label")),
        code=code(args.get("code")),
        dependency=dependency(args.get("dependency")),
    )


def _every(args: Mapping[str, str], name: str) -> list[str]:
    """Every value of a repeated parameter (a request's MultiDict), or its one value."""
    getlist = getattr(args, "getlist", None)
    if getlist is not None:
        return [str(v) for v in getlist(name)]
    one = args.get(name)
    return [one] if one else []


def labels(raw: list[str]) -> tuple[tuple[str, str], ...]:
    """``label``: ``key=value`` labels a flow must all carry (in order: the first is the one
    asked of the index, so the most selective should come first)."""
    texts = [t for each in raw for t in LABEL_SEPARATORS.split(each) if t]
    try:
        return tuple(label_rules.parse_all(texts).items())
    except label_rules.InvalidLabel as exc:
        raise BadRequest(f"label: {exc}") from None


def code(raw: str | None) -> str | None:
    """``code``: an ended flow's result code, as it ended with it (``RETRIES_EXHAUSTED``)."""
    if not raw:
        return None
    if len(raw) > MAX_CODE_CHARS or not raw.isprintable():
        raise BadRequest(f"code must be 1..{MAX_CODE_CHARS} printable characters")
    return raw


def dependency(raw: str | None) -> str | None:
    """``dependency``: what a step calls (its breaker's name)."""
    if not raw:
        return None
    if not re.fullmatch(DEPENDENCY_PATTERN, raw):
        raise BadRequest(f"dependency {raw[:80]!r} is not a dependency ({DEPENDENCY_PATTERN})")
    return raw


def parent(raw: str | None, tenant_raw: str | None) -> str | None:
    """``parent``: a flow id, whose children the list shows (of ``tenant``'s flow, if given)."""
    if not raw:
        return None
    if not re.fullmatch(FLOW_ID_PATTERN, raw) or not is_document_id(raw):
        raise BadRequest(f"parent {raw[:80]!r} is not a flow id ({FLOW_ID_PATTERN})")
    return flow_key(tenant(tenant_raw) or DEFAULT_TENANT, raw)


def flow_name(raw: str | None) -> str | None:
    if not raw:
        return None
    if not FLOW_NAME.fullmatch(raw):
        raise BadRequest(f"flow {raw[:80]!r} is not a flow name ([a-z][a-z0-9_-]{{0,62}})")
    return raw


def tenant(raw: str | None) -> str | None:
    if not raw:
        return None
    if not re.fullmatch(TENANT_PATTERN, raw):
        raise BadRequest(f"tenant {raw[:80]!r} is not a tenant name ({TENANT_PATTERN})")
    return raw


def status(raw: str | None) -> Status | None:
    if not raw:
        return None
    try:
        return Status(raw.upper())
    except ValueError:
        allowed = ", ".join(s.value for s in Status)
        raise BadRequest(f"status {raw[:40]!r} is not one of {allowed}") from None


def version(raw: str | None) -> int | None:
    if not raw:
        return None
    if not SMALL_NUMBER.fullmatch(raw) or not 1 <= int(raw) <= 1_000_000:
        raise BadRequest(f"version must be an integer 1..1000000, got {raw[:40]!r}")
    return int(raw)


def limit(raw: str | None, *, default: int = 50) -> int:
    if raw is None or raw == "":
        return default
    if not SMALL_NUMBER.fullmatch(raw) or not 1 <= int(raw) <= MAX_LIMIT:
        raise BadRequest(f"limit must be an integer 1..{MAX_LIMIT}")
    return int(raw)


def flag(raw: str | None, *, name: str) -> bool:
    """A yes/no parameter: true, false, 1, 0 (absent: false)."""
    if raw is None or raw == "":
        return False
    if raw.lower() not in ("true", "false", "1", "0"):
        raise BadRequest(f"{name} must be true or false, got {raw[:20]!r}")
    return raw.lower() in ("true", "1")


def cursor(raw: str | None) -> Cursor | None:
    if not raw:
        return None
    try:
        return Cursor.decode(raw)
    except InvalidCursor as exc:
        raise BadRequest(f"cursor: {exc}") from None


def timestamp(args: Mapping[str, str], name: str) -> datetime | None:
    """An ISO 8601 time (``2026-03-01T12:00:00Z``; a date or a time without a zone is UTC),
    in UTC, within what Firestore stores."""
    raw = args.get(name)
    if not raw:
        return None
    try:
        if len(raw) > MAX_TIME_CHARS:
            raise ValueError("too long")
        when = datetime.fromisoformat(raw.strip().replace("Z", "+00:00").replace(" ", "T"))
    except ValueError:
        raise BadRequest(
            f"{name} must be an ISO 8601 time like 2026-03-01T12:00:00Z, got {raw[:40]!r}"
        ) from None
    try:
        return in_utc(when)
    except OutOfRange:
        raise BadRequest(
            f"{name} must be from {FIRST} to {LAST} in UTC (what Firestore stores), "
            f"got {raw[:40]!r}"
        ) from None


def reason(raw: Any, *, required: bool, default: str = "") -> str:
    """Why an operator acts: at most MAX_REASON_CHARS printable characters."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        if required:
            raise BadRequest("reason is required: say why, it is recorded with your name")
        return default
    if not isinstance(raw, str):
        raise BadRequest("reason must be a string")
    text = " ".join(raw.split())  # newlines and tabs from a text area become spaces
    if len(text) > MAX_REASON_CHARS or not text.isprintable():
        raise BadRequest(f"reason must be at most {MAX_REASON_CHARS} printable characters")
    return text


def step_name(raw: Any) -> str:
    """A step of a flow, as a body or a form names it (required)."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        raise BadRequest("step is required: the step of the flow to reset to")
    if not isinstance(raw, str) or not STEP_NAME.fullmatch(raw):
        shown = raw[:70] if isinstance(raw, str) else type(raw).__name__
        raise BadRequest(f"step must be a step name ([a-z][a-z0-9_]*, ≤ 63), got {shown!r}")
    return raw


def boolean(raw: Any, *, name: str, default: bool) -> bool:
    """A JSON body's yes/no field: true or false (absent: ``default``)."""
    if raw is None:
        return default
    if not isinstance(raw, bool):
        raise BadRequest(f"{name} must be true or false, got {_json(raw)[:20]}")
    return raw


def replay_data(raw: Any) -> bytes | None:
    """An operator's fixed message: a JSON object of at most ``MAX_REPLAY_BYTES``, or None
    (replay as it was). What it must hold depends on the letter it replaces: ``vet_replay``."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    data = (raw if isinstance(raw, str) else _json(raw)).encode("utf-8")
    if len(data) > MAX_REPLAY_BYTES:
        raise BadRequest(f"the edited message must be at most {MAX_REPLAY_BYTES} bytes")
    return data


def vet_replay(letter: DeadLetter, data: bytes) -> None:
    """Refuse now, before it is published, an edit the consumer would refuse later: a start
    message must have the start message's fields; a message on the signals topic must be a
    signal (``core.signal_messages.SignalMessage``) or a callback completion with its string
    ``token``."""
    try:
        body = decode_json(data)
        if letter.signal:
            problem = shape_problem(body)
            if problem:
                raise InvalidMessage(problem)
            return
        StartMessage.model_validate(body)
    except InvalidMessage as exc:
        raise BadRequest(f"the edited message: {exc.reason}") from None
    except ValidationError as exc:
        raise BadRequest(f"the edited message would be rejected: {describe(exc)}") from None


def json_object(data: bytes) -> dict[str, Any]:
    """A request body as the JSON object it must be; BadRequest saying why not (the parser's
    own limits included: 100,000 nested brackets raise RecursionError, not a 500)."""
    try:
        value = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise BadRequest("the body must be UTF-8 JSON") from None
    except (ValueError, RecursionError):
        raise BadRequest(
            "the body is not JSON this api reads (malformed, or nested too deep)"
        ) from None
    if not isinstance(value, dict):
        raise BadRequest("the body must be a JSON object")
    return value


def callback_token(raw: Any) -> str:
    """A callback token as sent: a string of the characters tokens are made of. Whether it is
    one a flow awaits is for the engine to say."""
    if raw is None or raw == "":
        raise BadRequest(
            'a callback needs its token: in the body as {"token": "..."} or in the '
            "X-Relayflow-Callback-Token header"
        )
    if not isinstance(raw, str) or not CALLBACK_TOKEN.fullmatch(raw):
        raise BadRequest(
            "token must be the callback token the flow handed out (1..300 of A-Za-z0-9_.~-)"
        )
    return raw


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))

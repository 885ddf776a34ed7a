"""The start message on ``flow-requests``: its schema and its validation.

Every refusal is an InvalidMessage whose ``reason`` says exactly what was wrong, in words a
publisher can act on; the start function records it in ``rejected`` and acks the message.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from relayflow.core.errors import InvalidMessage, UnknownFlow
from relayflow.core.flows import Flow, Registry
from relayflow.core.labels import Labels
from relayflow.core.position import FLOW_ID_PATTERN, is_document_id
from relayflow.core.tenants import TENANT_PATTERN, Priority
from relayflow.core.values import UnstorableValue, check_storable

# A start input's size when the deployment offloads no values (``core.payloads``: 8 MiB when
# it does).
MAX_INPUT_BYTES = 64 * 1024
MAX_DEADLINE_S = 30 * 24 * 3600  # Cloud Tasks schedules at most 30 days ahead


class StartMessage(BaseModel):
    """``{"flow": name, "input": {...}, "flow_id"?: id, "deadline_s"?: seconds,
    "tenant"?: name, "priority"?: "high" | "low", "labels"?: {key: value}}``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    flow: str = Field(min_length=1, max_length=63)
    input: dict[str, Any]
    flow_id: str | None = Field(default=None, pattern=FLOW_ID_PATTERN)
    deadline_s: float | None = Field(default=None, gt=0, le=MAX_DEADLINE_S)
    tenant: str | None = Field(default=None, pattern=TENANT_PATTERN)
    priority: Priority | None = None
    labels: Labels | None = Field(
        default=None,
        description='What people find the flow by, e.g. {"order_id": "123"}: at most 16 '
        "(relayflow.core.labels), kept for good.",
    )

    @field_validator("flow_id")
    @classmethod
    def _document_id(cls, value: str | None) -> str | None:
        if value is not None and not is_document_id(value):
            raise ValueError("Firestore reserves ids that start and end with '__'")
        return value


MAX_REASON_CHARS = 1000
_SHOWN_ERRORS = 5


def describe(
    error: ValidationError, prefix: str = "", *, skip: Callable[[Any], bool] | None = None
) -> str:
    """A pydantic error as one bounded line: ``field: problem; field: problem; and N more``
    ('' if ``skip``, asked of each error's input, skips them all).

    Bounded (at most ~1 KiB): a message with 50,000 unknown keys must not produce a reason
    too large to store or to log.
    """
    items = error.errors(include_url=False, include_input=skip is not None)
    if skip is not None:
        items = [item for item in items if not skip(item.get("input"))]
        if not items:
            return ""
    parts = [
        f"{prefix}{_where(item['loc'])}: {item['msg'][:150]}" for item in items[:_SHOWN_ERRORS]
    ]
    more = len(items) - len(parts)
    return bounded("; ".join(parts) + (f"; and {more} more errors" if more else ""))


def bounded(reason: str) -> str:
    """``reason`` cut to MAX_REASON_CHARS, saying that it was."""
    if len(reason) <= MAX_REASON_CHARS:
        return reason
    return reason[: MAX_REASON_CHARS - 14] + " … (truncated)"


def _where(loc: tuple[int | str, ...]) -> str:
    # ascii(): a key with a lone surrogate or a control character is still named, escaped.
    parts = [p if isinstance(p, int) or p.isprintable() else ascii(p) for p in loc]
    return ".".join(str(p)[:80] for p in parts) or "message"


def decode_json(data: bytes) -> dict[str, Any]:
    """The message data as a JSON object, or InvalidMessage saying why not."""
    if not data:
        raise InvalidMessage("message has no data; expected a JSON object")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidMessage(f"message data is not UTF-8 text ({exc.reason})") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidMessage(f"message data is not JSON: {exc}") from None
    except (ValueError, RecursionError) as exc:  # e.g. a 5,000-digit number, 10,000 brackets
        raise InvalidMessage(f"message data is JSON no parser should accept: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidMessage(f"message must be a JSON object, got {type(value).__name__}")
    return value


def parse_start(
    data: bytes,
    registry: Registry,
    attributes: dict[str, str] | None = None,
    *,
    max_input_bytes: int = MAX_INPUT_BYTES,
) -> tuple[StartMessage, Flow]:
    """Validate a start message against the schema, the registry and the flow's input model.

    A ``tenant`` or ``priority`` message attribute counts when the body does not say."""
    body = decode_json(data)
    for name in ("tenant", "priority"):
        if name not in body and (attributes or {}).get(name):
            body[name] = (attributes or {})[name]
    message, flow = validate_start(body, registry, max_input_bytes=max_input_bytes)
    assert flow is not None  # a registry was given
    return message, flow


def validate_start(
    body: dict[str, Any], registry: Registry | None, *, max_input_bytes: int = MAX_INPUT_BYTES
) -> tuple[StartMessage, Flow | None]:
    """The checks of ``parse_start`` on a decoded body, in its order and with its reasons;
    without a ``registry`` (a client that does not have the app's), those that need none.

    The client (``relayflow.client``) calls this before it publishes, so a bad start fails at
    the call with the reason the start function would have recorded."""
    try:
        message = StartMessage.model_validate(body)
    except ValidationError as exc:
        raise InvalidMessage(describe(exc)) from None
    flow = None
    if registry is not None:
        try:
            flow = registry.get(message.flow)
        except UnknownFlow as exc:
            raise InvalidMessage(bounded(str(exc))) from None
    try:
        check_storable(message.input, where="input", max_bytes=max_input_bytes)
    except UnstorableValue as exc:
        raise InvalidMessage(bounded(str(exc))) from None
    if flow is not None and flow.input_model is not None:
        try:
            flow.input_model.model_validate(message.input)
        except ValidationError as exc:
            raise InvalidMessage(describe(exc, prefix="input.")) from None
    return message, flow


class PubsubEnvelope(BaseModel):
    """The Pub/Sub message inside a CloudEvent's data (push bodies and Eventarc alike)."""

    model_config = ConfigDict(extra="ignore")

    data: bytes = b""
    attributes: dict[str, str] = Field(default_factory=dict)
    message_id: str = Field(min_length=1)


def unwrap_pubsub(event_data: Any) -> PubsubEnvelope:
    """The message of a ``messagePublished`` CloudEvent, with data base64-decoded.

    Push bodies say ``messageId`` and Eventarc says ``message_id``; both are accepted.
    """
    message = event_data.get("message") if isinstance(event_data, dict) else None
    if not isinstance(message, dict):
        raise InvalidMessage("event has no Pub/Sub 'message' object")
    message_id = message.get("message_id") or message.get("messageId")
    if not isinstance(message_id, str) or not message_id:
        raise InvalidMessage("Pub/Sub message has no message id")
    try:
        data = base64.b64decode(message.get("data") or "", validate=True)
    except (binascii.Error, TypeError):
        raise InvalidMessage("Pub/Sub message data is not valid base64") from None
    attributes = message.get("attributes") or {}
    if not isinstance(attributes, dict):
        raise InvalidMessage("Pub/Sub message attributes must be an object")
    return PubsubEnvelope(
        data=data, attributes={str(k): str(v) for k, v in attributes.items()}, message_id=message_id
    )

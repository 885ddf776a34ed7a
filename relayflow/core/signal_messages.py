"""The signal message on ``flow-signals``: a signal sent to a flow by its id, as a publisher in
any language writes it (``relayflow.schemas`` publishes its JSON Schema).

The push route (``web.callbacks`` → ``web.signals.signal_message``) reads these fields and the
engine checks each (``core.engine.signals.checked_signal``: the name, the data's size and
storability, the id, the reason); this model states the same bounds for publishers, and
``shape_problem`` is what an operator's edited replay of a dead signal is checked against.
A message with a ``token`` instead completes a callback (``{"token", "output" | "error"}``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from relayflow.core.flows import SIGNAL_NAME_PATTERN
from relayflow.core.kinds.signal import MAX_REASON, MAX_SIGNAL_ID
from relayflow.core.messages import describe
from relayflow.core.position import FLOW_ID_PATTERN
from relayflow.core.tenants import TENANT_PATTERN

SIGNAL_ID_PATTERN = rf"^[A-Za-z0-9][A-Za-z0-9_.:@-]{{0,{MAX_SIGNAL_ID - 1}}}$"


class SignalMessage(BaseModel):
    """``{"flow_id", "signal", "data"?, "signal_id"?, "by"?, "reason"?, "item"?, "tenant"?}``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    flow_id: str = Field(pattern=FLOW_ID_PATTERN, description="The flow to signal, by its id.")
    signal: str = Field(pattern=SIGNAL_NAME_PATTERN, description="The signal's name.")
    data: dict[str, Any] = Field(
        default_factory=dict,
        description="What the waiting step outputs: a JSON object Firestore can store, 8 KiB "
        "at most.",
    )
    signal_id: str | None = Field(
        default=None,
        pattern=SIGNAL_ID_PATTERN,
        description="Makes resends no-ops; default: the Pub/Sub message id.",
    )
    by: str | None = Field(default=None, max_length=200, description="Who sent it (recorded).")
    reason: str | None = Field(default=None, max_length=MAX_REASON, description="Why (recorded).")
    item: int | None = Field(default=None, ge=0, description="The ForEach item it is for.")
    tenant: str | None = Field(default=None, pattern=TENANT_PATTERN)


def is_signal(body: dict[str, Any]) -> bool:
    """Whether a ``flow-signals`` message is a signal (it names one) rather than a callback
    completion (it has a token)."""
    return "signal" in body and "token" not in body


def shape_problem(body: dict[str, Any]) -> str:
    """What is wrong with a ``flow-signals`` message's shape, or '': a signal must fit
    ``SignalMessage``, a completion must carry a string ``token``."""
    if not is_signal(body):
        return "" if isinstance(body.get("token"), str) else "a signal needs a string 'token'"
    try:
        SignalMessage.model_validate(body)
    except ValidationError as exc:
        return f"a signal message: {describe(exc)}"
    return ""


__all__ = ["SIGNAL_ID_PATTERN", "SignalMessage", "is_signal", "shape_problem"]

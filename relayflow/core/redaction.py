"""What is kept and shown of sensitive values outside a flow's document: a refused start
message (``rejected``), a dead-lettered one (the api's and the console's dead letters).

Such a message was never a flow, so nothing in it is sealed: its sensitive input fields (the
flow it names marks them) are replaced by ``[redacted]`` before it is recorded or shown. A
message whose flow cannot be told (it is not JSON, names no flow this app runs, is a signal
for a flow id) is kept whole only if no flow of the app marks anything sensitive; otherwise
nothing of its data is kept, only why it was refused and how large it was.
"""

from __future__ import annotations

import json
from typing import Any

from relayflow.core import sensitive
from relayflow.core.errors import UnknownFlow
from relayflow.core.flows import Registry
from relayflow.core.scrubbing import REDACTED
from relayflow.core.sealing import sealed_at

WITHHELD = "withheld: flows of this app mark sensitive fields, and its flow could not be told"
REDACTED_NOTE = "sensitive fields redacted"


def kept_message(data: bytes, registry: Registry) -> tuple[bytes, str]:
    """What of a message's ``data`` may be kept or shown, and a note saying what was left
    out ('' if nothing was)."""
    marking = [flow for flow in registry if flow.sensitive_paths]
    if not marking:
        return data, ""
    body = _json_object(data)
    flow = _flow_of(body, registry) if body is not None else None
    if body is None or flow is None:
        return b"", WITHHELD
    marks = sensitive.under(flow, ("input",))
    if not marks or not isinstance(body.get("input"), dict):
        return data, ""
    body["input"] = sealed_at(body["input"], marks, ("input",), lambda value, at: REDACTED)
    return json.dumps(body, ensure_ascii=False).encode(), REDACTED_NOTE


def _json_object(data: bytes) -> dict[str, Any] | None:
    try:
        body = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return body if isinstance(body, dict) else None


def _flow_of(body: dict[str, Any], registry: Registry) -> tuple[sensitive.Path, ...] | None:
    """The sensitive paths of every version of the flow ``body`` names (a start may be for
    any of them), or None if it names none this registry runs."""
    name = body.get("flow")
    if not isinstance(name, str) or name not in registry:
        return None
    try:
        versions = [registry.get(name, v) for v in registry.versions(name)]
    except UnknownFlow:
        return None
    return tuple(p for flow in versions for p in flow.sensitive_paths)

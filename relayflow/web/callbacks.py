"""Completing callback tokens: ``POST /callbacks`` on the api, and the ``flow-signals`` topic
pushed to ``POST /signals``. Thin: decode, call ``Engine.complete``, map its answer. A
``flow-signals`` message that names a signal instead of a token is a signal to a flow by its
id (``web.signals``).

A token never goes in a URL: URLs reach access logs and Cloud Run's request log, and a token
read there completes the step. It goes in the body (``{"token", "output" | "error"}``) or in
the ``X-Relayflow-Callback-Token`` header; the old ``POST /callbacks/{token}`` says so and
completes nothing. A caller scoped to tenants completes only their flows' tokens: another
tenant's token is answered exactly as one no flow has.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from flask import Flask, Response, g, jsonify, request

from relayflow.core.engine import CallbackAnswer, Completion, Engine
from relayflow.core.errors import InvalidMessage
from relayflow.core.messages import decode_json, unwrap_pubsub
from relayflow.core.signal_messages import is_signal
from relayflow.web import guard, params
from relayflow.web.access import Caller
from relayflow.web.guard import CALLBACK_TOKEN_HEADER
from relayflow.web.signals import signal_message

log = logging.getLogger("relayflow.web.callbacks")
MAX_BODY_BYTES = 256 * 1024
_STATUS = {Completion.COMPLETED: 200, Completion.KEPT: 202, Completion.IGNORED: 409}
MOVED = (
    "a callback token goes in the body of POST /callbacks "
    '({"token": "...", "output": {...}} or {"token": "...", "error": {...}}) or in its '
    f"{CALLBACK_TOKEN_HEADER} header, never in the URL (URLs are logged): nothing was completed"
)


def completion_of(body: dict[str, Any]) -> dict[str, Any]:
    """``{"error": {...}}`` fails the step; ``{"output": {...}}``, or any other object as a
    whole, is its output."""
    error = body.get("error")
    if isinstance(error, dict):
        return {"error": error}
    output = body.get("output")
    return {"output": output if isinstance(output, dict) else body}


Guard = Callable[[Callable[..., Any]], Callable[..., Any]]


def add_callback_routes(app: Flask, engine: Engine, completer: Guard) -> None:
    """The routes that complete callback tokens: for completers (the external systems, the
    signals push account) and operators, not viewers."""

    @app.post("/callbacks")
    @completer
    def complete() -> Any:
        if len(request.get_data(cache=True)) > MAX_BODY_BYTES:
            return _error(413, "PAYLOAD_TOO_LARGE", f"at most {MAX_BODY_BYTES} bytes")
        body = dict(guard.body())
        in_body = body.pop("token", None)  # never part of the output
        sent = request.headers.get(CALLBACK_TOKEN_HEADER) or in_body
        token = params.callback_token(sent)
        try:
            answer = engine.complete(token, completion_of(body), visible=_scope(g.caller))
        except InvalidMessage as exc:
            return _error(400, "INVALID_ARGUMENT", exc.reason)
        return _answer(answer)

    @app.post("/callbacks/<path:_>")
    def moved(_: str) -> Any:
        """The old route: the token was in the URL. Refused before anything reads it."""
        return _error(410, "GONE", MOVED)

    @app.post("/signals")
    @completer
    def signal() -> Any:
        """A Pub/Sub push of ``{"token", "output" | "error"}``: acked unless it may succeed
        later (a 5xx makes Pub/Sub deliver it again)."""
        try:
            message = unwrap_pubsub(guard.body())
            body = decode_json(message.data)
            if is_signal(body):  # a signal to a flow by its id, not a token's completion
                return signal_message(engine, message, body, g.caller)
            token = body.pop("token", None)
            if not isinstance(token, str):
                raise InvalidMessage("a signal needs a string 'token'")
            answer = engine.complete(token, completion_of(body), visible=_scope(g.caller))
        except InvalidMessage as exc:
            log.warning("signal refused", extra={"reason": exc.reason})
            return {"outcome": "refused", "reason": exc.reason}
        return {"outcome": answer.outcome.value, "reason": answer.reason}


def _scope(caller: Caller) -> Callable[[str], bool] | None:
    """The tenants a caller's tokens may belong to (None: every tenant's)."""
    return caller.sees if caller.scoped else None


def _answer(answer: CallbackAnswer) -> tuple[Response, int]:
    body = {"outcome": answer.outcome.value, "flow_id": answer.flow_id, "reason": answer.reason}
    if answer.outcome is Completion.IGNORED:
        error = {"code": 409, "status": "FAILED_PRECONDITION", "message": answer.reason}
        return jsonify({"error": error, **body}), 409
    return jsonify(body), _STATUS[answer.outcome]


def _error(status: int, code: str, message: str) -> tuple[Response, int]:
    return jsonify({"error": {"code": status, "status": code, "message": message}}), status


def add_item_routes(app: Flask, engine: Engine, viewer: Guard) -> None:
    """``GET /flows/{id}/lanes``: where each ForEach item of a flow is (its lanes' progress).
    Another tenant's flow answers as a missing one (the api's 404 for FlowNotFound)."""

    @app.get("/flows/<flow_id>/lanes")
    @viewer
    def lanes(flow_id: str) -> Any:
        tenant = params.tenant(request.args.get("tenant"))
        found = engine.find(params.flow_id(flow_id), tenant=tenant, visible=g.caller.sees)
        return {"lanes": [_lane_view(lane) for lane in engine.lanes(found.key)]}


def _lane_view(lane: Any) -> dict[str, Any]:
    return {
        "lane_id": lane.flow_id,
        "step": lane.scope,
        "status": str(lane.status),
        "items": [item["index"] for item in lane.items],
        "at_item": lane.item_index,
        "position": lane.position.label() if lane.tracks else None,
        # Items run in order: those before the cursor are over (their outputs may have moved
        # into page objects: ``core.payloads``), done unless they failed.
        "done": [
            item["index"]
            for item in lane.items[: lane.cursor]
            if item["index"] not in lane.failed_items
        ],
        "failed": lane.failed_items,
        "updated_at": lane.updated_at.isoformat(),
    }


__all__ = ["MOVED", "add_callback_routes", "add_item_routes", "completion_of"]

"""Completing callback tokens: ``POST /callbacks/{token}`` on the api, and the ``flow-signals``
topic pushed to ``POST /signals``. Thin: decode, call ``Engine.complete``, map its answer."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from flask import Flask, Response, jsonify, request

from relayflow.core.engine import CallbackAnswer, Completion, Engine
from relayflow.core.errors import InvalidMessage
from relayflow.core.messages import decode_json, unwrap_pubsub

log = logging.getLogger("relayflow.web.callbacks")
MAX_BODY_BYTES = 256 * 1024
_STATUS = {Completion.COMPLETED: 200, Completion.KEPT: 202, Completion.IGNORED: 409}


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

    @app.post("/callbacks/<token>")
    @completer
    def complete(token: str) -> Any:
        data = request.get_data()
        if len(data) > MAX_BODY_BYTES:
            return _error(413, "PAYLOAD_TOO_LARGE", f"at most {MAX_BODY_BYTES} bytes")
        try:
            body = decode_json(data) if data.strip() else {}
            answer = engine.complete(token, completion_of(body))
        except InvalidMessage as exc:
            return _error(400, "INVALID_ARGUMENT", exc.reason)
        return _answer(answer)

    @app.post("/signals")
    @completer
    def signal() -> Any:
        """A Pub/Sub push of ``{"token", "output" | "error"}``: acked unless it may succeed
        later (a 5xx makes Pub/Sub deliver it again)."""
        try:
            message = unwrap_pubsub(request.get_json(silent=True) or {})
            body = decode_json(message.data)
            token = body.pop("token", None)
            if not isinstance(token, str):
                raise InvalidMessage("a signal needs a string 'token'")
            answer = engine.complete(token, completion_of(body))
        except InvalidMessage as exc:
            log.warning("signal refused", extra={"reason": exc.reason})
            return {"outcome": "refused", "reason": exc.reason}
        return {"outcome": answer.outcome.value, "reason": answer.reason}


def _answer(answer: CallbackAnswer) -> tuple[Response, int]:
    body = {"outcome": answer.outcome.value, "flow_id": answer.flow_id, "reason": answer.reason}
    if answer.outcome is Completion.IGNORED:
        error = {"code": 409, "status": "FAILED_PRECONDITION", "message": answer.reason}
        return jsonify({"error": error, **body}), 409
    return jsonify(body), _STATUS[answer.outcome]


def _error(status: int, code: str, message: str) -> tuple[Response, int]:
    return jsonify({"error": {"code": status, "status": code, "message": message}}), status


__all__ = ["add_callback_routes", "add_item_routes", "completion_of"]


def add_item_routes(app: Flask, engine: Engine, viewer: Guard) -> None:
    """``GET /flows/{id}/lanes``: where each ForEach item of a flow is (its lanes' progress)."""

    @app.get("/flows/<flow_id>/lanes")
    @viewer
    def lanes(flow_id: str) -> Any:
        from flask import g

        from relayflow.core.errors import FlowNotFound

        try:
            g.caller.shown(engine.get(flow_id))
            found = engine.lanes(flow_id)
        except FlowNotFound as exc:
            return _error(404, "NOT_FOUND", str(exc))
        return {"lanes": [_lane_view(lane) for lane in found]}


def _lane_view(lane: Any) -> dict[str, Any]:
    return {
        "lane_id": lane.flow_id,
        "step": lane.scope,
        "status": str(lane.status),
        "items": [item["index"] for item in lane.items],
        "at_item": lane.item_index,
        "position": lane.position.label() if lane.tracks else None,
        "done": sorted(int(i) for i in lane.item_outputs),
        "failed": lane.failed_items,
        "updated_at": lane.updated_at.isoformat(),
    }

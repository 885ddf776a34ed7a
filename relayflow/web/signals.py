"""Sending signals to flows: ``POST /flows/{id}/signals/{name}`` on the api, and a signal
message on ``flow-signals`` (pushed to ``POST /signals``, beside callback completions). Thin:
read the body, call ``Engine.signal``, map its answer.

The api route is for signallers (``RELAYFLOW_API_SIGNALLERS``) and operators; the caller's
identity is recorded as who sent it. A flow outside the caller's tenant scope answers 404, as
one that does not exist. A ``flow-signals`` message is JSON with a ``signal`` field (a callback
completion has a ``token`` instead): ``{"flow_id", "signal", "data"?, "signal_id"?, "reason"?,
"tenant"?, "item"?, "by"?}``; its signal id is the Pub/Sub message id unless it gives one, so
a redelivery is a no-op. A message that is not a signal to keep, or that nothing will take, is
acked and recorded in ``rejected`` with why: Pub/Sub never delivers it again for ever.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from flask import Flask, Response, g, jsonify, request

from relayflow.core.engine import Engine, SignalAnswer, Signalled
from relayflow.core.engine.signals import SignalTooLarge
from relayflow.core.errors import InvalidMessage
from relayflow.core.messages import PubsubEnvelope
from relayflow.web import guard, params
from relayflow.web.access import Caller

log = logging.getLogger("relayflow.web.signals")
# A body well over a signal's data limit (``kinds.signal.MAX_SIGNAL_BYTES``) is refused unread.
MAX_BODY_BYTES = 64 * 1024
_IGNORED_STATUS = {
    "FLOW_NOT_FOUND": (404, "NOT_FOUND"),
    "TOO_MANY_PENDING": (429, "RESOURCE_EXHAUSTED"),
}
_STATUS = {Signalled.DELIVERED: 200, Signalled.KEPT: 202, Signalled.DUPLICATE: 200}

Guard = Callable[[Callable[..., Any]], Callable[..., Any]]


def add_signal_routes(app: Flask, engine: Engine, signaller: Guard) -> None:
    """``POST /flows/{id}/signals/{name}``: ``{"data": {...}, "signal_id", "reason", "item"}``,
    for signallers and operators."""

    @app.post("/flows/<flow_id>/signals/<name>")
    @signaller
    def send(flow_id: str, name: str) -> Any:
        if len(request.get_data(cache=True)) > MAX_BODY_BYTES:
            return _error(
                413, "PAYLOAD_TOO_LARGE", f"a signal's body is at most {MAX_BODY_BYTES} bytes"
            )
        body = guard.body()
        caller: Caller = g.caller
        try:
            answer = engine.signal(
                params.flow_id(flow_id),
                name,
                body.get("data"),
                signal_id=body.get("signal_id"),
                by=caller.identity,
                reason=params.reason(body.get("reason"), required=False),
                item=body.get("item"),
                tenant=params.tenant(request.args.get("tenant")),
                visible=caller.sees,
            )
        except SignalTooLarge as exc:
            return _error(413, "PAYLOAD_TOO_LARGE", exc.reason)
        except InvalidMessage as exc:
            return _error(400, "INVALID_ARGUMENT", exc.reason)
        return answer_response(answer)


def answer_response(answer: SignalAnswer) -> tuple[Response, int]:
    """What the api answers: 200 delivered (or a duplicate), 202 kept, 404 no such flow (or
    one the caller may not see), 429 too many kept, 409 anything else nothing will take."""
    body = answer_json(answer)
    if answer.outcome is not Signalled.IGNORED:
        return jsonify(body), _STATUS[answer.outcome]
    status, code = _IGNORED_STATUS.get(answer.code, (409, "FAILED_PRECONDITION"))
    error = {"code": status, "status": code, "message": answer.reason, "reason": answer.code}
    return jsonify({"error": error, **body}), status


def answer_json(answer: SignalAnswer) -> dict[str, Any]:
    return {
        "outcome": answer.outcome.value,
        "flow_id": answer.flow_id,
        "reason": answer.reason,
        "code": answer.code,
    }


def signal_message(
    engine: Engine, message: PubsubEnvelope, body: dict[str, Any], caller: Caller
) -> dict[str, Any]:
    """Send the signal a ``flow-signals`` message carries; what to answer Pub/Sub (always a
    2xx: a message refused or ignored is recorded in ``rejected``, never retried)."""
    try:
        flow_id = body.get("flow_id")
        if not isinstance(flow_id, str):
            raise InvalidMessage("a signal message needs a string 'flow_id'")
        claimed = body.get("by")
        by = f"{claimed} (via flow-signals)" if isinstance(claimed, str) and claimed else ""
        answer = engine.signal(
            params.flow_id(flow_id),
            body.get("signal"),  # type: ignore[arg-type]  # checked by the engine
            body.get("data"),
            signal_id=body.get("signal_id") or f"msg-{message.message_id}",
            by=by[:200] or f"flow-signals ({caller.identity})",
            reason=body.get("reason") or "",
            item=body.get("item"),
            tenant=params.tenant(
                body.get("tenant") if isinstance(body.get("tenant"), str) else None
            ),
            visible=caller.sees if caller.scoped else None,
        )
    except (InvalidMessage, params.BadRequest) as exc:
        reason = exc.reason if isinstance(exc, InvalidMessage) else str(exc)
        engine.reject_message(
            message.data, message.message_id, message.attributes, f"signal refused: {reason}"
        )
        log.warning("signal refused", extra={"reason": reason})
        return {"outcome": "refused", "reason": reason}
    if answer.outcome is Signalled.IGNORED:
        why = f"signal {body.get('signal')!r} for flow {answer.flow_id!r} ignored: {answer.reason}"
        engine.reject_message(message.data, message.message_id, message.attributes, why)
    return answer_json(answer)


def _error(status: int, code: str, message: str) -> tuple[Response, int]:
    return jsonify({"error": {"code": status, "status": code, "message": message}}), status


__all__ = ["add_signal_routes", "answer_response", "signal_message"]

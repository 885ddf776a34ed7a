"""What every fake dependency's Flask app shares: JSON errors, body parsing, the
Idempotency-Key header, create answers, and the fault-injection admin routes."""

from __future__ import annotations

from typing import Any, TypeVar

from flask import Flask, request
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, TypeAdapter, ValidationError
from werkzeug.exceptions import HTTPException

from relayflow.emulators.client_api.errors import ApiError
from relayflow.emulators.client_api.faults import FaultInjector
from relayflow.emulators.client_api.idempotency import Outcome
from relayflow.emulators.client_api.models import FaultRule

_Model = TypeVar("_Model", bound=BaseModel)
_RULES = TypeAdapter(list[FaultRule])


def register_errors(app: Flask) -> None:
    """Every error, ours or Flask's (404, 405 ...), as ``{"error": {"code", "message"}}``."""

    @app.errorhandler(ApiError)
    def api_error(error: ApiError) -> ResponseReturnValue:
        return error.body(), error.status, error.headers

    @app.errorhandler(HTTPException)
    def http_error(error: HTTPException) -> ResponseReturnValue:
        code = (error.name or "error").upper().replace(" ", "_")
        status = error.code or 500
        return ApiError(status, code, error.description or code).body(), status


def register_fault_admin(app: Flask, faults: FaultInjector) -> None:
    """POST (arm), GET (list) and DELETE (clear) /admin/faults."""

    @app.post("/admin/faults")
    def add_faults() -> ResponseReturnValue:
        faults.add(_parse_rules())
        return {"rules": faults.describe()}, 201

    @app.get("/admin/faults")
    def list_faults() -> ResponseReturnValue:
        return {"rules": faults.describe()}, 200

    @app.delete("/admin/faults")
    def clear_faults() -> ResponseReturnValue:
        faults.clear()
        return {"rules": []}, 200


def created(outcome: Outcome) -> ResponseReturnValue:
    """201 for a new resource; 200 with ``Idempotent-Replayed: true`` for a replay."""
    if outcome.replayed:
        return outcome.body, 200, {"Idempotent-Replayed": "true"}
    return outcome.body, 201


def idempotency_key() -> str:
    key = request.headers.get("Idempotency-Key", "").strip()
    if not key or len(key) > 255:
        raise ApiError(400, "IDEMPOTENCY_KEY_REQUIRED", "send an Idempotency-Key header (1-255)")
    return key


def parse(model: type[_Model]) -> _Model:
    """The JSON body validated as ``model``; 400 INVALID_ARGUMENT naming what was wrong."""
    try:
        return model.model_validate(_json_body())
    except ValidationError as error:
        raise ApiError(400, "INVALID_ARGUMENT", _summary(error)) from None


def flag(name: str) -> bool:
    """A boolean query parameter: ``?detail=1`` (or true / yes)."""
    return request.args.get(name, "").lower() in ("1", "true", "yes")


def _json_body() -> Any:
    body = request.get_json(silent=True)
    if body is None:
        raise ApiError(400, "INVALID_ARGUMENT", "the body must be JSON")
    return body


def _parse_rules() -> list[FaultRule]:
    body = _json_body()
    # Accept a bare list (the documented form) or {"rules": [...]}.
    rules = body.get("rules") if isinstance(body, dict) else body
    try:
        return _RULES.validate_python(rules)
    except ValidationError as error:
        raise ApiError(400, "INVALID_ARGUMENT", _summary(error)) from None


def _summary(error: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in item['loc']) or 'body'}: {item['msg']}"
        for item in error.errors()
    )

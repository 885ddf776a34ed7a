"""The fake client API as a Flask app: registrations, entities, fault injection and stats.

Business routes (counted in ``requests``, subject to faults):
    POST /registrations {"resource"} + Idempotency-Key -> 201 | replay 200 | 409 other body |
        422 REJECTED for ``reject-*``; status turns ACTIVE ``activation_delay_s`` after creation
    GET /registrations/{id}, DELETE /registrations/{id} (cancel: idempotent compensation)
    POST /entities {"registration_id", "name"} + Idempotency-Key -> 201 | 200 | 409 NOT_ACTIVE
Admin routes (never faulted): POST|GET|DELETE /admin/faults, POST /admin/config,
    POST /admin/reset, GET /stats, GET /healthz.
Errors are always ``{"error": {"code", "message"}}``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

from flask import Flask, Response, g, jsonify, request
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, TypeAdapter, ValidationError
from werkzeug.exceptions import HTTPException

from emulators.client_api.errors import ApiError
from emulators.client_api.faults import FaultInjector, Random
from emulators.client_api.models import (
    ConfigUpdate,
    EntityRequest,
    FaultRule,
    RegistrationRequest,
)
from emulators.client_api.state import Activation, ClientApiState, Clock, Outcome

Sleep = Callable[[float], None]
_Model = TypeVar("_Model", bound=BaseModel)
_RULES = TypeAdapter(list[FaultRule])
# Paths that are the API under test; admin, stats and health are never faulted nor counted.
_BUSINESS_PREFIXES = ("/registrations", "/entities")


def create_app(
    *,
    clock: Clock = time.time,
    activation_delay_s: float = 2.0,
    sleep: Sleep = time.sleep,
    rand: Random = random.random,
) -> Flask:
    """A fresh app with its own state; inject clock, sleep and rand to test without waiting."""
    state = ClientApiState(clock=clock, activation=Activation(activation_delay_s))
    faults = FaultInjector(rand=rand)
    app = Flask(__name__)
    _register_errors(app)
    _register_faults(app, state, faults, sleep)
    _register_registrations(app, state)
    _register_entities(app, state)
    _register_admin(app, state, faults)
    return app


def _register_errors(app: Flask) -> None:
    @app.errorhandler(ApiError)
    def api_error(error: ApiError) -> ResponseReturnValue:
        return error.body(), error.status

    @app.errorhandler(HTTPException)
    def http_error(error: HTTPException) -> ResponseReturnValue:
        code = (error.name or "error").upper().replace(" ", "_")
        status = error.code or 500
        return ApiError(status, code, error.description or code).body(), status


def _register_faults(
    app: Flask, state: ClientApiState, faults: FaultInjector, sleep: Sleep
) -> None:
    @app.before_request
    def inject_before() -> ResponseReturnValue | None:
        rule = _take_fault(state, faults)
        if rule is None:
            return None
        if rule.delay_s:
            sleep(rule.delay_s)  # a slow answer is the fault itself, not a wait for something
        if rule.status is None:
            return None
        if rule.after_effect:
            g.fault_after = rule
            return None
        return _fault_response(rule.status, rule.retry_after_s)

    @app.after_request
    def inject_after(response: Response) -> Response:
        rule: FaultRule | None = g.pop("fault_after", None)
        if rule is None or rule.status is None:
            return response
        return _fault_response(rule.status, rule.retry_after_s)


def _take_fault(state: ClientApiState, faults: FaultInjector) -> FaultRule | None:
    if not request.path.startswith(_BUSINESS_PREFIXES):
        return None
    state.count_request()
    rule = faults.take(request.method, request.path)
    if rule is not None:
        state.count_fault()
    return rule


def _fault_response(status: int, retry_after_s: float | None) -> Response:
    response = jsonify(ApiError(status, "INJECTED_FAULT", f"injected {status}").body())
    response.status_code = status
    if retry_after_s is not None:
        # Whole numbers give a standard header; fractions keep fast tests fast.
        response.headers["Retry-After"] = format(retry_after_s, "g")
    return response


def _register_registrations(app: Flask, state: ClientApiState) -> None:
    @app.post("/registrations")
    def create_registration() -> ResponseReturnValue:
        key = _idempotency_key()
        body = _parse(RegistrationRequest)
        return _created(state.create_registration(key, body.resource))

    @app.get("/registrations/<registration_id>")
    def get_registration(registration_id: str) -> ResponseReturnValue:
        return state.get_registration(registration_id), 200

    @app.delete("/registrations/<registration_id>")
    def cancel_registration(registration_id: str) -> ResponseReturnValue:
        return state.cancel_registration(registration_id), 200


def _register_entities(app: Flask, state: ClientApiState) -> None:
    @app.post("/entities")
    def create_entity() -> ResponseReturnValue:
        key = _idempotency_key()
        body = _parse(EntityRequest)
        return _created(state.create_entity(key, body.registration_id, body.name))


def _register_admin(app: Flask, state: ClientApiState, faults: FaultInjector) -> None:
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

    @app.post("/admin/config")
    def configure() -> ResponseReturnValue:
        return state.configure(_parse(ConfigUpdate)), 200

    @app.post("/admin/reset")
    def reset() -> ResponseReturnValue:
        faults.clear()
        state.reset()
        return {"reset": True}, 200

    @app.get("/stats")
    def stats() -> ResponseReturnValue:
        return state.stats(), 200

    @app.get("/healthz")
    def healthz() -> ResponseReturnValue:
        return {"status": "ok"}, 200


def _created(outcome: Outcome) -> ResponseReturnValue:
    if outcome.replayed:
        return outcome.body, 200, {"Idempotent-Replayed": "true"}
    return outcome.body, 201


def _idempotency_key() -> str:
    key = request.headers.get("Idempotency-Key", "").strip()
    if not key or len(key) > 255:
        raise ApiError(400, "IDEMPOTENCY_KEY_REQUIRED", "send an Idempotency-Key header (1-255)")
    return key


def _json_body() -> Any:
    body = request.get_json(silent=True)
    if body is None:
        raise ApiError(400, "INVALID_ARGUMENT", "the body must be JSON")
    return body


def _parse(model: type[_Model]) -> _Model:
    try:
        return model.model_validate(_json_body())
    except ValidationError as error:
        raise ApiError(400, "INVALID_ARGUMENT", _summary(error)) from None


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

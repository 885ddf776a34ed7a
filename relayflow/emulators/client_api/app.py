"""The fake client API as a Flask app: registrations, entities, callbacks, faults and stats.

Business routes (counted in ``requests``, subject to faults):
    POST /registrations {"resource", "callback_url"?} + Idempotency-Key -> 201 | replay 200 |
        409 other body | 422 REJECTED for ``reject-*``; ACTIVE ``activation_delay_s`` after
        creation, and then (per the callback mode) a POST to ``callback_url``
    GET /registrations/{id}, DELETE /registrations/{id} (cancel: idempotent compensation)
    POST /entities {"registration_id", "name"} + Idempotency-Key -> 201 | 200 | 409 NOT_ACTIVE
    GET /entities/{id}, DELETE /entities/{id} (idempotent compensation of the create)
Admin routes (never faulted): POST|GET|DELETE /admin/faults, POST /admin/config,
    POST /admin/reset, GET /stats[?detail=1], GET /healthz.
Errors are always ``{"error": {"code", "message"}}``.
"""

from __future__ import annotations

import random
import time

from flask import Flask
from flask.typing import ResponseReturnValue

from relayflow.emulators.client_api.callbacks import CallbackDispatcher, Post
from relayflow.emulators.client_api.faults import (
    FaultHooks,
    FaultInjector,
    Random,
    Sleep,
    install_faults,
)
from relayflow.emulators.client_api.http import (
    created,
    flag,
    idempotency_key,
    parse,
    register_errors,
    register_fault_admin,
)
from relayflow.emulators.client_api.models import ConfigUpdate, EntityRequest, RegistrationRequest
from relayflow.emulators.client_api.state import Activation, ClientApiState, Clock

# Paths that are the API under test; admin, stats and health are never faulted nor counted.
_BUSINESS_PREFIXES = ("/registrations", "/entities")
_DISPATCHER = "client_api.callbacks"


def create_app(
    *,
    clock: Clock = time.time,
    activation_delay_s: float = 2.0,
    sleep: Sleep = time.sleep,
    rand: Random = random.random,
    post: Post | None = None,
) -> Flask:
    """A fresh app with its own state; inject clock, sleep, rand and the callback ``post`` to
    test without waiting. Callbacks are sent only once ``callback_dispatcher(app)`` is started
    (the command line does) or ticked (tests do)."""
    state = ClientApiState(clock=clock, activation=Activation(activation_delay_s))
    faults = FaultInjector(rand=rand)
    app = Flask(__name__)
    app.extensions[_DISPATCHER] = CallbackDispatcher(
        outbox=state.outbox, ledger=state, clock=clock, post=post
    )
    register_errors(app)
    hooks = FaultHooks(_BUSINESS_PREFIXES, state.count_request, state.count_fault)
    install_faults(app, faults, hooks, sleep)
    _register_registrations(app, state)
    _register_entities(app, state)
    register_fault_admin(app, faults)
    _register_admin(app, state, faults)
    return app


def callback_dispatcher(app: Flask) -> CallbackDispatcher:
    """The app's callback sender: ``start()`` it, or call ``tick(now)`` in a test."""
    dispatcher: CallbackDispatcher = app.extensions[_DISPATCHER]
    return dispatcher


def _register_registrations(app: Flask, state: ClientApiState) -> None:
    @app.post("/registrations")
    def create_registration() -> ResponseReturnValue:
        key = idempotency_key()
        body = parse(RegistrationRequest)
        return created(
            state.create_registration(
                key, body.resource, body.callback_url, callback_token=body.callback_token
            )
        )

    @app.get("/registrations/<registration_id>")
    def get_registration(registration_id: str) -> ResponseReturnValue:
        return state.get_registration(registration_id), 200

    @app.delete("/registrations/<registration_id>")
    def cancel_registration(registration_id: str) -> ResponseReturnValue:
        return state.cancel_registration(registration_id), 200


def _register_entities(app: Flask, state: ClientApiState) -> None:
    @app.post("/entities")
    def create_entity() -> ResponseReturnValue:
        key = idempotency_key()
        body = parse(EntityRequest)
        return created(state.create_entity(key, body.registration_id, body.name))

    @app.get("/entities/<entity_id>")
    def get_entity(entity_id: str) -> ResponseReturnValue:
        return state.get_entity(entity_id), 200

    @app.delete("/entities/<entity_id>")
    def delete_entity(entity_id: str) -> ResponseReturnValue:
        return state.delete_entity(entity_id), 200


def _register_admin(app: Flask, state: ClientApiState, faults: FaultInjector) -> None:
    @app.post("/admin/config")
    def configure() -> ResponseReturnValue:
        return state.configure(parse(ConfigUpdate)), 200

    @app.post("/admin/reset")
    def reset() -> ResponseReturnValue:
        faults.clear()
        state.reset()
        return {"reset": True}, 200

    @app.get("/stats")
    def stats() -> ResponseReturnValue:
        return state.stats(detail=flag("detail")), 200

    @app.get("/healthz")
    def healthz() -> ResponseReturnValue:
        return {"status": "ok"}, 200

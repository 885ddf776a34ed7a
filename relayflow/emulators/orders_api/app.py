"""The example app's fake dependencies as one Flask app, one path prefix per dependency.

Business routes (counted in ``requests``, subject to faults):
    inventory      POST /inventory/reservations {sku, quantity, order_id} + Idempotency-Key
                       -> 201 HELD | 200 replay | 409 OUT_OF_STOCK (``oos-*``) | 409 key reused
                   GET, DELETE (release: idempotent) /inventory/reservations/{id}
    payments       POST /payments/charges {order_id, amount_cents, currency} + Idempotency-Key
                       -> 201 SUCCEEDED | 200 | 402 CARD_DECLINED | 429 RATE_LIMITED + Retry-After
                   GET /payments/charges/{id}, POST /payments/charges/{id}/refund (idempotent)
    shipping       POST /shipping/labels {order_id, address} + Idempotency-Key -> 201 PENDING
                   GET /shipping/labels/{id} (PENDING, then READY), DELETE (void: idempotent)
    notifications  POST /notifications {order_id, message} + Idempotency-Key -> 201 SENT;
                   GET /notifications/{id}
Admin routes (never faulted): POST|GET|DELETE /admin/faults, POST /admin/config,
    POST /admin/reset, GET /stats[?detail=1], GET /healthz.
Errors are always ``{"error": {"code", "message"}}``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from flask import Flask
from flask.typing import ResponseReturnValue

from relayflow.emulators.client_api.errors import ApiError
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
from relayflow.emulators.orders_api.effects import (
    CHARGES,
    LABELS,
    NOTIFICATIONS,
    RESERVATIONS,
    Clock,
    EffectLedger,
)
from relayflow.emulators.orders_api.models import (
    ChargeRequest,
    ConfigUpdate,
    LabelRequest,
    NotificationRequest,
    ReservationRequest,
)
from relayflow.emulators.orders_api.rules import OrdersConfig, check_card, check_stock, rate_limited

_BUSINESS_PREFIXES = ("/inventory", "/payments", "/shipping", "/notifications")


def create_app(
    *,
    clock: Clock = time.time,
    label_delay_s: float = 2.0,
    sleep: Sleep = time.sleep,
    rand: Random = random.random,
) -> Flask:
    """A fresh app with its own state; inject clock, sleep and rand to test without waiting.
    ``rand`` decides both fault rules and the payments API's 429s."""
    ledger = EffectLedger(clock=clock, config=OrdersConfig(label_delay_s=label_delay_s))
    faults = FaultInjector(rand=rand)
    app = Flask(__name__)
    register_errors(app)
    hooks = FaultHooks(
        _BUSINESS_PREFIXES,
        lambda: ledger.count("requests"),
        lambda: ledger.count("faults_injected"),
    )
    install_faults(app, faults, hooks, sleep)
    _inventory(app, ledger)
    _payments(app, ledger, rand)
    _shipping(app, ledger)
    _notifications(app, ledger)
    register_fault_admin(app, faults)
    _admin(app, ledger, faults)
    return app


def _rejected(ledger: EffectLedger, check: Callable[[], None]) -> None:
    """Run a business rule; count its refusal (which it raises) in ``business_rejections``."""
    try:
        check()
    except ApiError:
        ledger.count("business_rejections")
        raise


def _inventory(app: Flask, ledger: EffectLedger) -> None:
    @app.post("/inventory/reservations")
    def reserve() -> ResponseReturnValue:
        key = idempotency_key()
        body = parse(ReservationRequest)
        _rejected(ledger, lambda: check_stock(body.sku))
        return created(ledger.create(RESERVATIONS, key, body.fields()))

    @app.get("/inventory/reservations/<reservation_id>")
    def get_reservation(reservation_id: str) -> ResponseReturnValue:
        return ledger.get(RESERVATIONS, reservation_id), 200

    @app.delete("/inventory/reservations/<reservation_id>")
    def release(reservation_id: str) -> ResponseReturnValue:
        return ledger.undo(RESERVATIONS, reservation_id), 200


def _payments(app: Flask, ledger: EffectLedger, rand: Random) -> None:
    @app.post("/payments/charges")
    def charge() -> ResponseReturnValue:
        key = idempotency_key()
        body = parse(ChargeRequest)
        _throttle(ledger, rand)
        _rejected(ledger, lambda: check_card(body.order_id, body.amount_cents))
        return created(ledger.create(CHARGES, key, body.fields()))

    @app.get("/payments/charges/<charge_id>")
    def get_charge(charge_id: str) -> ResponseReturnValue:
        return ledger.get(CHARGES, charge_id), 200

    @app.post("/payments/charges/<charge_id>/refund")
    def refund(charge_id: str) -> ResponseReturnValue:
        return ledger.undo(CHARGES, charge_id), 200


def _throttle(ledger: EffectLedger, rand: Random) -> None:
    """Answer the configured share of charge requests 429, before anything else happens."""
    config = ledger.config
    if config.payments_429_rate > 0 and rand() < config.payments_429_rate:
        ledger.count("payments_rate_limited")
        raise rate_limited(config.payments_retry_after_s)


def _shipping(app: Flask, ledger: EffectLedger) -> None:
    @app.post("/shipping/labels")
    def create_label() -> ResponseReturnValue:
        key = idempotency_key()
        body = parse(LabelRequest)
        return created(ledger.create(LABELS, key, body.fields()))

    @app.get("/shipping/labels/<label_id>")
    def get_label(label_id: str) -> ResponseReturnValue:
        return ledger.get(LABELS, label_id), 200

    @app.delete("/shipping/labels/<label_id>")
    def void_label(label_id: str) -> ResponseReturnValue:
        return ledger.undo(LABELS, label_id), 200


def _notifications(app: Flask, ledger: EffectLedger) -> None:
    @app.post("/notifications")
    def notify() -> ResponseReturnValue:
        key = idempotency_key()
        body = parse(NotificationRequest)
        return created(ledger.create(NOTIFICATIONS, key, body.fields()))

    @app.get("/notifications/<notification_id>")
    def get_notification(notification_id: str) -> ResponseReturnValue:
        return ledger.get(NOTIFICATIONS, notification_id), 200


def _admin(app: Flask, ledger: EffectLedger, faults: FaultInjector) -> None:
    @app.post("/admin/config")
    def configure() -> ResponseReturnValue:
        update = parse(ConfigUpdate)
        return ledger.configure(lambda config: config.updated(update)).to_json(), 200

    @app.post("/admin/reset")
    def reset() -> ResponseReturnValue:
        faults.clear()
        ledger.reset()
        return {"reset": True}, 200

    @app.get("/stats")
    def stats() -> ResponseReturnValue:
        return ledger.stats(detail=flag("detail")), 200

    @app.get("/healthz")
    def healthz() -> ResponseReturnValue:
        return {"status": "ok"}, 200

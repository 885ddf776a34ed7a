"""The HTTP surfaces, as Flask app factories: the task receivers (the operator api and its
console are in ``relayflow.web.api``), and what every service shares.

Routes are thin: authenticate, decode, call one engine method, map the outcome to a status.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from flask import Flask, Response, jsonify, request
from opentelemetry.trace import SpanKind, Tracer
from pydantic import ValidationError

from relayflow import telemetry
from relayflow.core.engine import Ran
from relayflow.core.messages import describe
from relayflow.core.position import TaskPayload
from relayflow.gcp.auth import TokenVerifier, Unauthorized
from relayflow.gcp.store import FlowStore
from relayflow.metrics import Metrics
from relayflow.runtime import Runtime
from relayflow.telemetry import Counters

log = logging.getLogger("relayflow.web.services")
View = Callable[[], Any]


def error(status: int, code: str, message: str) -> tuple[Response, int]:
    """Google's JSON error shape: ``{"error": {"code", "status", "message"}}``."""
    return jsonify({"error": {"code": status, "status": code, "message": message}}), status


def base_app(name: str, counters: Counters, metrics: Metrics | None = None) -> Flask:
    """A Flask app with what every service serves: health, cost counters, metrics, and
    Google-style JSON errors."""
    app = Flask(name)
    metrics = metrics or Metrics()

    @app.get("/healthz")
    def healthz() -> Any:
        return {"status": "ok"}

    @app.get("/stats")
    def stats() -> Any:
        return {"counters": counters.snapshot()}

    @app.get("/metrics")
    def metrics_page() -> Any:
        # JSON, named as in Cloud Monitoring: {name: {unit, points: [{labels, value | count,
        # sum, min, max, buckets}]}}; this process's values since it started.
        snapshot = metrics.snapshot()
        if snapshot is None:
            off = "metrics are off: set RELAYFLOW_METRICS_EXPORTER=local (or console, gcp)"
            return {"enabled": False, "message": off, "metrics": {}}
        return {"enabled": True, "metrics": snapshot}

    @app.errorhandler(404)
    def not_found(_: Exception) -> Any:
        return error(404, "NOT_FOUND", f"no route {request.method} {request.path}")

    @app.errorhandler(500)
    def internal(_: Exception) -> Any:
        # Flask has logged the exception; Cloud Tasks / Pub/Sub retry a 5xx, which is the point.
        return error(500, "INTERNAL", "internal error; the service log has the details")

    @app.errorhandler(405)
    def not_allowed(_: Exception) -> Any:
        return error(405, "METHOD_NOT_ALLOWED", f"{request.method} not allowed on {request.path}")

    return app


def _authenticated(verifier: TokenVerifier | None) -> Callable[[View], View]:
    """Refuse a request without a valid token before anything else (tracing included) runs."""

    def wrap(view: View) -> View:
        if verifier is None:
            return view

        @functools.wraps(view)
        def checked() -> Any:
            try:
                verifier.verify(request.headers.get("Authorization"))
            except Unauthorized as exc:
                log.warning("unauthorized request", extra={"reason": str(exc)})
                return error(401, "UNAUTHENTICATED", str(exc))
            return view()

        return checked

    return wrap


def _traced(tracer: Tracer | None, name: str) -> Callable[[View], View]:
    """Run a route in a server span, a child of the request's ``traceparent`` header."""

    def wrap(view: View) -> View:
        if tracer is None:
            return view  # tracing off: the route runs exactly as it would without tracing

        @functools.wraps(view)
        def traced() -> Any:
            traceparent = request.headers.get(telemetry.TRACEPARENT)
            attributes = _delivery_attributes()
            with telemetry.span(
                tracer, name, traceparent=traceparent, kind=SpanKind.SERVER, attributes=attributes
            ) as span:
                response = view()
                if isinstance(response, dict) and "outcome" in response:
                    span.set_attribute("outcome", str(response["outcome"]))
                return response

        return traced

    return wrap


def _delivery_attributes() -> dict[str, str]:
    """The request and what Cloud Tasks says about this delivery of it."""
    found = {
        "http.request.method": request.method,
        "url.path": request.path,
        "cloud_tasks.queue": request.headers.get("X-CloudTasks-QueueName"),
        "cloud_tasks.task": request.headers.get("X-CloudTasks-TaskName"),
        "cloud_tasks.retry_count": request.headers.get("X-CloudTasks-TaskRetryCount"),
    }
    return {key: value for key, value in found.items() if value is not None}


def task_app(
    runtime: Runtime,
    *,
    route: str,
    verifier: TokenVerifier | None,
    sweep_verifier: TokenVerifier | None = None,
) -> Flask:
    """A service that Cloud Tasks calls at ``route`` with a TaskPayload body.

    ``sweep_verifier`` admits the callers of ``POST /sweep`` (Cloud Scheduler's account too);
    without it, /sweep admits what ``route`` admits.
    """
    app = base_app(route.strip("/").replace("/", "-"), runtime.counters, runtime.metrics)
    engine, store = runtime.engine, runtime.store

    @app.post(route)
    @_authenticated(verifier)
    @_traced(runtime.tracer, f"POST {route}")
    def run_task() -> Any:
        try:
            payload = TaskPayload.model_validate_json(request.get_data())
        except ValidationError as exc:
            runtime.metrics.message_rejected("", "INVALID_TASK")
            return _reject_task(store, describe(exc), runtime.settings.retention_days)
        ran = engine.run_task(payload, redelivery=_retried(request.headers))
        body = {"outcome": ran.value, "flow_id": payload.flow_id}
        if ran is Ran.BUSY:
            # Not 2xx, so Cloud Tasks delivers it again later, by when the delivery holding
            # the claim has committed (this one is then stale) or died (its claim expired).
            return body, 409
        return body

    @app.post("/sweep")
    @_authenticated(sweep_verifier or verifier)
    @_traced(runtime.tracer, "POST /sweep")
    def sweep() -> Any:
        report = engine.sweep(grace_s=runtime.settings.sweep_grace_s)
        return report.__dict__

    return app


def _retried(headers: Any) -> bool:
    """Whether Cloud Tasks says this delivery retries a failed one (not a first delivery or a
    duplicate of one, which carry the count of the delivery they copy)."""
    count = headers.get("X-CloudTasks-TaskRetryCount", "0")
    return count.isdigit() and int(count) > 0


def _reject_task(store: FlowStore, reason: str, retention_days: float) -> Any:
    """A task body that can never be run: record it and answer 2xx so it is not retried."""
    task_name = request.headers.get("X-CloudTasks-TaskName", f"unnamed-{uuid.uuid4().hex}")
    log.error("task payload rejected", extra={"task": task_name, "reason": reason})
    now = datetime.now(UTC)
    store.reject(
        f"task-{task_name}"[:200],
        {
            "kind": "task",
            "task": task_name,
            "reason": reason,
            "body": request.get_data()[:16384],
            "rejected_at": now,
            "expire_at": now + timedelta(days=retention_days),
        },
    )
    return {"outcome": "rejected", "reason": reason}

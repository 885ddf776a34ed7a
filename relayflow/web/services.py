"""The HTTP surfaces, as Flask app factories: the task receivers (the operator api and its
console are in ``relayflow.web.api``), and what every service shares.

Routes are thin: authenticate, decode, call one engine method, map the outcome to a status.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from flask import Flask, Response, jsonify, request
from opentelemetry.trace import SpanKind, Tracer
from pydantic import ValidationError

from relayflow import telemetry
from relayflow.core.bulk import BulkTask
from relayflow.core.engine import Ran
from relayflow.core.errors import Unauthorized, VerifierUnavailable
from relayflow.core.messages import describe
from relayflow.core.metrics import Metrics
from relayflow.core.position import TaskPayload, is_document_id
from relayflow.runtime import BULK_PATH, Runtime
from relayflow.telemetry import Counters
from relayflow.web.access import Verifier, verify

log = logging.getLogger("relayflow.web.services")
View = Callable[[], Any]
Reader = Callable[[Callable[..., Any]], Callable[..., Any]]
# Every request body, on every service: a task is at most 1 MB (Cloud Tasks' limit), and
# nothing the api reads needs more (a callback's output is at most 256 KiB).
MAX_REQUEST_BYTES = 1024 * 1024
# Where the one Cloud Scheduler job of schedules posts, every minute (the worker serves it).
SCHEDULES_TICK_PATH = "/schedules/tick"
MAX_SHOWN_PATH = 200  # of a path a 404 or 405 names: its reason stays short


def error(status: int, code: str, message: str) -> tuple[Response, int]:
    """Google's JSON error shape: ``{"error": {"code", "status", "message"}}``."""
    return jsonify({"error": {"code": status, "status": code, "message": message}}), status


def base_app(
    name: str,
    counters: Counters,
    metrics: Metrics | None = None,
    *,
    reader: Reader | None = None,
) -> Flask:
    """A Flask app with what every service serves: health, cost counters, metrics, and
    Google-style JSON errors. ``reader`` guards the counters and metrics (the api's viewers);
    without one they are open to whoever reaches the service (the worker and the poller,
    which only Cloud Tasks may invoke)."""
    app = Flask(name)
    app.config["MAX_CONTENT_LENGTH"] = MAX_REQUEST_BYTES
    metrics = metrics or Metrics()
    readers = reader or (lambda view: view)

    @app.get("/healthz")
    def healthz() -> Any:
        return {"status": "ok"}

    @app.get("/stats")
    @readers
    def stats() -> Any:
        return {"counters": counters.snapshot()}

    @app.get("/metrics")
    @readers
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
        return error(404, "NOT_FOUND", f"no route {request.method} {request.path[:MAX_SHOWN_PATH]}")

    @app.errorhandler(500)
    def internal(_: Exception) -> Any:
        # Flask has logged the exception; Cloud Tasks / Pub/Sub retry a 5xx, which is the point.
        return error(500, "INTERNAL", "internal error; the service log has the details")

    @app.errorhandler(405)
    def not_allowed(_: Exception) -> Any:
        shown = request.path[:MAX_SHOWN_PATH]
        return error(405, "METHOD_NOT_ALLOWED", f"{request.method} not allowed on {shown}")

    @app.errorhandler(413)
    def too_large(_: Exception) -> Any:
        return error(
            413, "PAYLOAD_TOO_LARGE", f"a request body is at most {MAX_REQUEST_BYTES} bytes"
        )

    return app


def _authenticated(verifier: Verifier | None) -> Callable[[View], View]:
    """Refuse a request without a valid token before anything else (tracing included) runs."""

    def wrap(view: View) -> View:
        if verifier is None:
            return view

        @functools.wraps(view)
        def checked() -> Any:
            try:
                verify(verifier, request.headers.get("Authorization"))
            except Unauthorized as exc:
                log.warning("unauthorized request", extra={"reason": str(exc)})
                return error(401, "UNAUTHENTICATED", str(exc))
            except VerifierUnavailable as exc:
                # Google's certs cannot be had: not the caller's fault, and worth a retry
                # (Cloud Tasks and Pub/Sub deliver a 503 again).
                log.error("token verifier unavailable", extra={"reason": str(exc)})
                return error(503, "UNAVAILABLE", str(exc))
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
    verifier: Verifier | None,
    sweep_verifier: Verifier | None = None,
    bulk: bool = False,
) -> Flask:
    """A service that Cloud Tasks calls at ``route`` with a TaskPayload body.

    ``sweep_verifier`` admits the callers of ``POST /sweep`` (Cloud Scheduler's account too);
    without it, /sweep admits what ``route`` admits. ``bulk``: it also runs bulk actions'
    batches (``POST /tasks/bulk``, the worker).
    """
    app = base_app(route.strip("/").replace("/", "-"), runtime.counters, runtime.metrics)
    engine = runtime.engine

    @app.post(route)
    @_authenticated(verifier)
    @_traced(runtime.tracer, f"POST {route}")
    def run_task() -> Any:
        try:
            payload = TaskPayload.model_validate_json(request.get_data())
        except ValidationError as exc:
            runtime.metrics.message_rejected("", "INVALID_TASK")
            return _reject_task(runtime, describe(exc))
        if not is_document_id(payload.flow_id):  # Firestore would refuse the read: a 500
            runtime.metrics.message_rejected("", "INVALID_TASK")
            reason = "flow_id: of the form __…__, which Firestore reserves"
            return _reject_task(runtime, reason)
        headers = request.headers
        ran = engine.run_task(payload, redelivery=_retried(headers), answered=_answered(headers))
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
        rescued = runtime.bulk_runner().sweep() if runtime.bulk_queue is not None else 0
        return {**report.__dict__, "bulk_batches_rescued": rescued}

    if bulk:
        _add_bulk_route(app, runtime, verifier)

    @app.post(SCHEDULES_TICK_PATH)
    @_authenticated(sweep_verifier or verifier)
    @_traced(runtime.tracer, f"POST {SCHEDULES_TICK_PATH}")
    def tick_schedules() -> Any:
        # ``now`` drives the tick's clock only where no token is checked (the local stack and
        # its tests): a deployment's ticks are the wall clock's, whoever calls.
        try:
            now = None if runtime.settings.verify_tokens else _driven_now(request.get_data())
        except ValueError as exc:
            return error(400, "INVALID_ARGUMENT", str(exc))
        return runtime.scheduler().tick(now).to_dict()

    return app


def _add_bulk_route(app: Flask, runtime: Runtime, verifier: Verifier | None) -> None:
    @app.post(BULK_PATH)
    @_authenticated(verifier)
    @_traced(runtime.tracer, f"POST {BULK_PATH}")
    def run_batch() -> Any:
        try:
            task = BulkTask.model_validate_json(request.get_data())
        except ValidationError as exc:
            runtime.metrics.message_rejected("", "INVALID_TASK")
            return _reject_task(runtime, f"a bulk batch task: {describe(exc)}")
        # A failure here is a 500: Cloud Tasks delivers the batch again, which acts on no
        # flow twice (``core.bulk_runner``).
        return runtime.bulk_runner().run_batch(task).to_dict()


def _driven_now(body: bytes) -> datetime | None:
    """The ``{"now": ISO 8601}`` a local caller drives a tick with (None: the clock's);
    ValueError saying what is wrong with it."""
    try:
        asked = json.loads(body or b"{}").get("now")
        at = datetime.fromisoformat(asked) if asked else None
    except (ValueError, TypeError, AttributeError):
        at = datetime.min  # naive: refused below
    if at is not None and at.tzinfo is None:
        raise ValueError(f"now: an ISO 8601 time with its offset, not {body[:80]!r}")
    return at.astimezone(UTC) if at is not None else None


def _retried(headers: Any) -> bool:
    """Whether Cloud Tasks says this delivery retries a failed one (not a first delivery or a
    duplicate of one, which carry the count of the delivery they copy)."""
    count = str(headers.get("X-CloudTasks-TaskRetryCount", "0"))
    # Read as digits, not with int(): int() refuses more than 4,300 of them (a 500).
    return re.fullmatch(r"[0-9]+", count) is not None and count.strip("0") != ""


def _answered(headers: Any) -> bool:
    """Whether the attempt this one retries got an HTTP answer that says it is over: any
    status but a 504 (Cloud Run's request timeout, after which a handler may still run). No
    header, no answer: it timed out or its connection broke, and it may still run. (The
    headers: https://cloud.google.com/tasks/docs/creating-http-target-tasks; retried on "any
    other HTTP response code ... or no response": https://cloud.google.com/tasks/docs/reference/
    rest/v2/projects.locations.queues.tasks#httprequest.)
    """
    status = str(headers.get("X-CloudTasks-TaskPreviousResponse", ""))
    return re.fullmatch(r"[1-5][0-9][0-9]", status) is not None and status != "504"


def _reject_task(runtime: Runtime, reason: str) -> Any:
    """A task body that can never be run: record it and answer 2xx so it is not retried."""
    task_name = request.headers.get("X-CloudTasks-TaskName") or f"unnamed-{uuid.uuid4().hex}"
    runtime.engine.reject_task(task_name, reason, request.get_data())
    return {"outcome": "rejected", "reason": reason}

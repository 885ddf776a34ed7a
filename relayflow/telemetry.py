"""Logging, cost counters and distributed tracing.

Logs are one JSON object per line with a ``severity`` field, the shape Cloud Logging parses from
a Cloud Run container's stdout; inside a span they carry Cloud Logging's trace fields, so the
console shows a trace's logs beside it. Counters count what a flow costs (Firestore reads and
writes, tasks created, messages published); services expose them on ``GET /stats`` and the e2e
bench reads them.

Tracing (OpenTelemetry) makes one flow one trace: the start message's ``googclient_traceparent``
is the parent of the start span, the flow document keeps the start's traceparent, every task
carries a ``traceparent`` header and the result event a ``googclient_traceparent`` attribute.
Spans are only made by the tracer that ``configure_tracing`` returns; with tracing off it returns
None and nothing is extracted, injected or stored.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import Tracer

from relayflow.core.scrubbing import scrubbed_json
from relayflow.core.tracing import (
    PUBSUB_PREFIX,
    PUBSUB_TRACEPARENT,
    TRACEPARENT,
    current_log_fields,
    current_traceparent,
    joined,
    log_fields,
    mark_error,
    pubsub_trace_attributes,
    span,
    trace_headers,
)

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor
    from opentelemetry.sdk.trace.export import SpanExporter

    from relayflow.settings import Settings

TRACER_NAME = "relayflow"

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message"}


class JsonFormatter(logging.Formatter):
    """One JSON line per record; extra fields (flow_id, step, ...) are kept as keys.

    Given the project id, a record logged inside a span also names the span's trace in the
    fields Cloud Logging reads (``logging.googleapis.com/trace`` and ``/spanId``). Sensitive
    values the current task opened for its handlers are scrubbed from the line, whatever
    logged them (``core.scrubbing``).
    """

    def __init__(self, project_id: str | None = None) -> None:
        super().__init__()
        self._project_id = project_id

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "severity": record.levelname,
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(current_log_fields())
        entry.update({k: v for k, v in record.__dict__.items() if k not in _STANDARD})
        if self._project_id is not None:
            entry.update(trace_log_fields(self._project_id))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return scrubbed_json(json.dumps(entry, default=str))


def trace_log_fields(project_id: str) -> dict[str, Any]:
    """Cloud Logging's trace fields for the current span; empty outside any span."""
    span = trace.get_current_span().get_span_context()
    if not span.is_valid:
        return {}
    return {
        "logging.googleapis.com/trace": f"projects/{project_id}/traces/{span.trace_id:032x}",
        "logging.googleapis.com/spanId": f"{span.span_id:016x}",
        "logging.googleapis.com/trace_sampled": span.trace_flags.sampled,
    }


def configure_logging(level: str = "INFO", *, project_id: str | None = None) -> None:
    """Send relayflow's logs to stdout as JSON lines (idempotent).

    ``project_id`` lets log lines name their trace (``projects/P/traces/T``).
    """
    root = logging.getLogger()
    if any(isinstance(h.formatter, JsonFormatter) for h in root.handlers):
        return
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter(project_id))
    root.addHandler(handler)
    root.setLevel(level)


class Counters:
    """Thread-safe named counters of the operations a flow costs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, int] = {}

    def add(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self._values[name] = self._values.get(name, 0) + amount

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._values)


def configure_tracing(settings: Settings, *, service: str) -> Tracer | None:
    """Install the global tracer provider once and return relayflow's tracer.

    None when ``trace_exporter`` is "none": callers then make no spans at all. The provider is
    global because client libraries (google-cloud-pubsub's own tracing) look for it there.
    """
    if settings.trace_exporter == "none":
        return None
    # Imported here so that a process with tracing off never loads the SDK.
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    installed = trace.get_tracer_provider()
    if isinstance(installed, TracerProvider):  # configured already (a module imported twice)
        return installed.get_tracer(TRACER_NAME)
    provider = TracerProvider(
        resource=Resource.create({"service.name": service, "gcp.project_id": settings.project_id}),
        # Honour the caller's decision for a start message that carries one: a flow is
        # traced whole or not at all.
        sampler=ParentBased(TraceIdRatioBased(settings.trace_sample_ratio)),
    )
    provider.add_span_processor(_processor(settings))
    trace.set_tracer_provider(provider)
    return provider.get_tracer(TRACER_NAME)


def _processor(settings: Settings) -> SpanProcessor:
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    exporter = _exporter(settings)
    if settings.trace_exporter == "console":
        return SimpleSpanProcessor(exporter)  # locally: see each span as it ends
    return BatchSpanProcessor(exporter)  # the provider flushes it at exit


def _exporter(settings: Settings) -> SpanExporter:
    if settings.trace_exporter == "gcp":
        from opentelemetry.exporter.cloud_trace import CloudTraceSpanExporter

        # The exporter package ships no type hints.
        return CloudTraceSpanExporter(project_id=settings.project_id)  # type: ignore[no-untyped-call]
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    # stderr, one line per span: stdout is for JSON log lines only.
    return ConsoleSpanExporter(
        out=sys.stderr, formatter=lambda span: span.to_json(indent=None) + os.linesep
    )


__all__ = [
    "PUBSUB_PREFIX",
    "PUBSUB_TRACEPARENT",
    "TRACEPARENT",
    "TRACER_NAME",
    "Counters",
    "JsonFormatter",
    "configure_logging",
    "configure_tracing",
    "current_traceparent",
    "joined",
    "log_fields",
    "mark_error",
    "pubsub_trace_attributes",
    "span",
    "trace_headers",
    "trace_log_fields",
]

"""The tracing and log-field helpers the engine uses, on the OpenTelemetry API alone.

One flow is one trace (see ``relayflow.telemetry``, which configures the exporters and the JSON
log format and re-exports these): the engine opens spans with ``span``, joins a flow's trace
with ``joined`` when it works for the flow outside the flow's own task, and names the flow and
tenant on every log line of a task with ``log_fields``. With tracing off the engine has no
tracer and ``span`` yields a span that records nothing.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import INVALID_SPAN, Span, SpanKind, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

TRACEPARENT = "traceparent"
# google-cloud-pubsub's name for W3C fields in message attributes.
PUBSUB_PREFIX = "googclient_"
PUBSUB_TRACEPARENT = PUBSUB_PREFIX + TRACEPARENT
# W3C trace context only: it is all Cloud Trace, Cloud Tasks and Pub/Sub carry; no baggage.
_W3C = TraceContextTextMapPropagator()

# Fields every log line of the current task carries (its flow and tenant), set by the engine.
_LOG_FIELDS: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "relayflow_log_fields", default=MappingProxyType({})
)


@contextmanager
def log_fields(**fields: str) -> Iterator[None]:
    """Add ``fields`` to every log line written inside the block (in this thread or task)."""
    token = _LOG_FIELDS.set({**_LOG_FIELDS.get(), **fields})
    try:
        yield
    finally:
        _LOG_FIELDS.reset(token)


def current_log_fields() -> Mapping[str, str]:
    """The fields ``log_fields`` set for the current block (the log formatter adds them)."""
    return _LOG_FIELDS.get()


@contextmanager
def span(
    tracer: Tracer | None,
    name: str,
    *,
    traceparent: str | None = None,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Mapping[str, AttributeValue] | None = None,
) -> Iterator[Span]:
    """A span made current for the block; a do-nothing span when tracing is off.

    Its parent is ``traceparent`` (a W3C header received from elsewhere) when given, else the
    current span.
    """
    if tracer is None:
        yield INVALID_SPAN
        return
    parent = _parse(traceparent)
    with tracer.start_as_current_span(name, context=parent, kind=kind, attributes=attributes) as s:
        yield s


def mark_error(span: Span, description: str) -> None:
    """Mark a span failed (Cloud Trace shows it red) without an exception to record."""
    span.set_status(StatusCode.ERROR, description)


def trace_headers() -> dict[str, str]:
    """HTTP headers that make the receiver's span a child of the current span (none outside)."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier)
    return carrier


def current_traceparent() -> str | None:
    """The W3C traceparent of the current span, or None outside any span."""
    return trace_headers().get(TRACEPARENT)


def pubsub_trace_attributes() -> dict[str, str]:
    """Message attributes carrying the current span, named as google-cloud-pubsub names them."""
    return {PUBSUB_PREFIX + key: value for key, value in trace_headers().items()}


@contextmanager
def joined(traceparent: str | None) -> Iterator[None]:
    """Run the block inside the trace ``traceparent`` names, unless already inside it.

    Work done for a flow outside its own task (a sweep, an operator's cancel) still belongs to
    the flow's trace: what it enqueues or publishes then carries the flow's trace context.
    """
    flow = _parse(traceparent)
    if flow is None or _trace_id(flow) == _trace_id(None):
        yield
        return
    token = otel_context.attach(flow)
    try:
        yield
    finally:
        otel_context.detach(token)


def _parse(traceparent: str | None) -> Context | None:
    """The context a W3C traceparent names; None when it is absent or malformed."""
    if not traceparent:
        return None
    parent = _W3C.extract({TRACEPARENT: traceparent})
    return parent if _trace_id(parent) else None


def _trace_id(ctx: Context | None) -> int:
    """The trace id of the span in ``ctx`` (the current context when None); 0 for none."""
    return trace.get_current_span(ctx).get_span_context().trace_id

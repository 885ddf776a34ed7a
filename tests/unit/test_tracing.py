"""relayflow.core.tracing: spans on the OpenTelemetry API (a do-nothing one with tracing off),
continued from a W3C traceparent received from elsewhere, carried on out as headers and Pub/Sub
attributes; a flow's trace joined for work done outside its tasks; the log fields of a block.

Spans go to the SDK's InMemorySpanExporter through a tracer made for each test; the global
tracer provider is never touched.
"""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import INVALID_SPAN, SpanKind, StatusCode, Tracer

from relayflow.core import tracing

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PUBLISHER_SPAN = "00f067aa0ba902b7"
PUBLISHED = f"00-{TRACE_ID}-{PUBLISHER_SPAN}-01"  # what a traced publisher attaches


def test_joined_leaves_a_span_of_the_same_trace_current(tracer: Tracer) -> None:
    with tracing.span(tracer, "outer"):
        inside = tracing.current_traceparent()
        assert inside is not None
        with tracing.joined(f"00-{inside[3:35]}-{PUBLISHER_SPAN}-01"):
            assert tracing.current_traceparent() == inside
    with tracing.joined(None):
        assert tracing.current_traceparent() is None
    with tracing.joined("garbage"):
        assert tracing.current_traceparent() is None


def test_with_tracing_off_a_span_records_nothing_and_carries_nothing() -> None:
    with tracing.span(None, "start flow", traceparent=PUBLISHED) as span:
        assert span is INVALID_SPAN
        assert tracing.current_traceparent() is None
        assert tracing.trace_headers() == {}
        assert tracing.pubsub_trace_attributes() == {}


def test_a_span_continues_the_trace_its_traceparent_names(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    attributes = {"message_id": "m-1"}
    with tracing.span(
        tracer, "start flow", traceparent=PUBLISHED, kind=SpanKind.CONSUMER, attributes=attributes
    ):
        pass
    (span,) = exporter.get_finished_spans()
    assert span.parent is not None
    assert (f"{span.context.trace_id:032x}", f"{span.parent.span_id:016x}") == (
        TRACE_ID,
        PUBLISHER_SPAN,
    )
    assert (span.kind, dict(span.attributes or {})) == (SpanKind.CONSUMER, attributes)


@pytest.mark.parametrize("traceparent", [None, "", "garbage", f"00-{'0' * 32}-{PUBLISHER_SPAN}-01"])
def test_a_span_without_a_usable_traceparent_begins_a_trace_of_its_own(
    tracer: Tracer, exporter: InMemorySpanExporter, traceparent: str | None
) -> None:
    with tracing.span(tracer, "start flow", traceparent=traceparent):
        pass
    (span,) = exporter.get_finished_spans()
    assert span.parent is None
    assert f"{span.context.trace_id:032x}" != TRACE_ID


def test_the_current_span_goes_out_as_a_traceparent_header_and_pubsub_attribute(
    tracer: Tracer,
) -> None:
    with tracing.span(tracer, "outer") as span:
        ids = span.get_span_context()
        expected = f"00-{ids.trace_id:032x}-{ids.span_id:016x}-{ids.trace_flags:02x}"
        assert tracing.trace_headers() == {"traceparent": expected}
        assert tracing.current_traceparent() == expected
        assert tracing.pubsub_trace_attributes() == {"googclient_traceparent": expected}
    assert tracing.current_traceparent() is None


def test_joining_another_flows_trace_makes_its_span_the_parent(tracer: Tracer) -> None:
    with tracing.span(tracer, "sweep"):  # the sweeper's own trace
        with tracing.joined(PUBLISHED):
            assert tracing.current_traceparent() == PUBLISHED
        assert tracing.current_traceparent() != PUBLISHED  # left again after the block


def test_a_failed_span_is_marked_an_error_with_its_description(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    with tracing.span(tracer, "action reserve") as span:
        tracing.mark_error(span, "upstream 503")
    (finished,) = exporter.get_finished_spans()
    assert (finished.status.status_code, finished.status.description) == (
        StatusCode.ERROR,
        "upstream 503",
    )


def test_log_fields_hold_for_their_block_nested_blocks_adding_to_them() -> None:
    assert dict(tracing.current_log_fields()) == {}
    with tracing.log_fields(flow_id="f-1", tenant="acme"):
        with tracing.log_fields(tenant="beta", step="reserve"):
            assert dict(tracing.current_log_fields()) == {
                "flow_id": "f-1",
                "tenant": "beta",
                "step": "reserve",
            }
        assert dict(tracing.current_log_fields()) == {"flow_id": "f-1", "tenant": "acme"}
    assert dict(tracing.current_log_fields()) == {}

"""relayflow.core.engine.results: a flow's result event published, then marked sent; each end
counted once however often it is settled; a publish that fails after the commit that ended the
flow had marked it unmarks it again, so the sweeper sends it; a clean-up's end counted as one."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Tracer

from relayflow.core.engine.results import Results
from relayflow.core.metrics import Metrics
from relayflow.core.ports import Snapshot
from relayflow.core.position import Position, TaskKind
from relayflow.core.records import Cleanup, CleanupState, FlowRecord, Result
from relayflow.core.state import Status
from relayflow.core.tenants import TenantPolicy, Tenants

from ..fakes import FakeEvents, FakeStore
from .support import NOW


class Counted(Metrics):
    def __init__(self) -> None:
        self.ended: list[str] = []
        self.cleanups: list[tuple[str, str]] = []

    def flow_ended(self, record: FlowRecord) -> None:
        self.ended.append(record.flow_id)

    def cleanup_ended(self, record: FlowRecord, tenant: str = "default") -> None:
        self.cleanups.append((record.flow_id, tenant))


class Ports:
    def __init__(self, tracer: Tracer | None = None) -> None:
        self.store, self.events, self.metrics = FakeStore(), FakeEvents(), Counted()
        self.results = Results(
            store=self.store,
            events=self.events,
            tenants=Tenants(tenants={"acme": TenantPolicy()}),
            metrics=self.metrics,
            tracer=tracer,
        )

    def ended(self, **changes: Any) -> Snapshot:
        """A flow that ended FAILED, as stored."""
        record = FlowRecord(
            flow_id="order-7",
            flow="orders",
            input={},
            status=Status.FAILED,
            position=Position(step_index=0, step="pay", kind=TaskKind.ACTION),
            result=Result(status=Status.FAILED, code="DECLINED", message="declined"),
            created_at=NOW,
            updated_at=NOW,
        ).model_copy(update=changes)
        assert self.store.create(record)
        found = self.store.read(record.key)
        assert found is not None
        return found

    def published(self) -> bool:
        record = self.store.get("order-7")
        assert record is not None
        return record.result_published


def test_a_result_is_published_then_marked_sent_and_its_end_counted_once() -> None:
    ports = Ports()
    found = ports.ended()
    ports.results.publish(found.record, found)
    assert [e["code"] for e in ports.events.published] == ["DECLINED"]
    assert ports.published() and ports.metrics.ended == ["order-7"]
    # settled again from what was read before the mark (a duplicate task): published again
    # (subscribers dedupe on flow id and generation), counted once
    ports.results.publish(found.record, None)
    assert len(ports.events.published) == 2 and ports.metrics.ended == ["order-7"]


def test_a_result_the_ending_commit_marked_is_counted_by_that_commit_only() -> None:
    ports = Ports()
    found = ports.ended(result_published=True)
    ports.results.publish(found.record, found, marked=True)  # the commit just made
    ports.results.publish(found.record, None, marked=True)  # its task delivered again
    assert len(ports.events.published) == 2
    assert ports.metrics.ended == ["order-7"]


def test_a_failed_publish_of_a_result_its_commit_marked_unmarks_it_then_raises() -> None:
    ports = Ports()
    found = ports.ended(result_published=True)
    ports.events.failures_left = 1
    with pytest.raises(ConnectionError):
        ports.results.publish(found.record, found, marked=True)
    assert not ports.published()  # the sweeper finds it unpublished and sends it
    assert ports.metrics.ended == []


def test_a_failed_publish_of_an_unmarked_result_changes_nothing() -> None:
    ports = Ports()
    found = ports.ended()
    ports.events.failures_left = 1
    with pytest.raises(ConnectionError):
        ports.results.publish(found.record, found)
    assert not ports.published() and ports.metrics.ended == []


def test_a_result_that_cannot_be_unmarked_is_left_to_its_tasks_redelivery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ports = Ports()
    found = ports.ended(result_published=True)
    ports.events.failures_left = 1
    ports.store.failing_writes = 1  # the store is down too
    with pytest.raises(ConnectionError, match="pubsub unavailable"):
        ports.results.publish(found.record, found, marked=True)
    assert ports.published()
    assert "could not unmark a result" in caplog.text


def test_an_ended_clean_up_is_counted_as_one_by_its_tenants_label_and_logged_if_abandoned(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ports = Ports()
    window = Cleanup(
        state=CleanupState.ABANDONED,
        since=NOW,
        until=NOW + timedelta(hours=1),
        left=["charge"],
    )
    found = ports.ended(tenant="acme", cleanup=window)
    with caplog.at_level(logging.ERROR, logger="relayflow.core.engine"):
        ports.results.publish(found.record, found)
    assert ports.metrics.cleanups == [("order-7", "acme")] and ports.metrics.ended == []
    assert [line.getMessage() for line in caplog.records] == ["clean-up abandoned"]
    assert [e["event"] for e in ports.events.published] == ["cleanup"]


def test_a_publish_is_a_producer_span_naming_the_flow_and_its_status() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ports = Ports(provider.get_tracer("test"))
    found = ports.ended()
    ports.results.publish(found.record, found)
    (span,) = exporter.get_finished_spans()
    assert (span.name, span.kind) == ("publish result", SpanKind.PRODUCER)
    assert dict(span.attributes or {}) == {"flow_id": "order-7", "status": "FAILED"}

"""Result events: a flow's end (and later its clean-up's) published once per generation."""

from __future__ import annotations

import functools
import logging

from opentelemetry.trace import SpanKind, Tracer

from relayflow.core import planner, tracing
from relayflow.core.metrics import Metrics
from relayflow.core.ports import Events, Snapshot, Store
from relayflow.core.records import FlowRecord
from relayflow.core.result_events import event_kind
from relayflow.core.tenants import Tenants

log = logging.getLogger("relayflow.core.engine")


class Results:
    """Publishes result events and marks them sent, counting each end once."""

    def __init__(
        self,
        *,
        store: Store,
        events: Events,
        tenants: Tenants,
        metrics: Metrics,
        tracer: Tracer | None,
    ) -> None:
        self._store = store
        self._events = events
        self._tenants = tenants
        self._metrics = metrics
        self._tracer = tracer

    def publish(
        self, record: FlowRecord, version: Snapshot | None, *, marked: bool = False
    ) -> None:
        """Publish the flow's result event, then mark it sent — unless the commit that ended
        the flow ``marked`` it already (see ``focus.marked``): then a failed publish unmarks
        it, so the sweeper sends it, before the error makes Cloud Tasks deliver the task
        again."""
        attributes = {"flow_id": record.flow_id, "status": str(record.status)}
        try:
            with tracing.span(
                self._tracer, "publish result", kind=SpanKind.PRODUCER, attributes=attributes
            ):
                self._events.publish_result(record)
        except Exception:
            if marked:
                self._unmark(record)
            raise
        if marked:
            if version is not None:  # the commit just made: counted once, here
                self._count_end(record)
            return
        # Counted by whoever marks it: once per generation, however often it was settled.
        if self._store.mark_published(record.key, record.position.generation, start=version):
            self._count_end(record)

    def _count_end(self, record: FlowRecord) -> None:
        """Count what the event just published announced: the flow's end, or its clean-up's."""
        if event_kind(record) == "cleanup":
            self._metrics.cleanup_ended(record, self._tenants.label(record.tenant))
            if record.cleanup is not None and record.cleanup.left:
                log.error(
                    "clean-up abandoned",
                    extra={"flow_id": record.flow_id, "left": record.cleanup.left},
                )
        else:
            self._metrics.flow_ended(record)

    def _unmark(self, record: FlowRecord) -> None:
        generation = record.position.generation
        try:
            self._store.change(
                record.key, functools.partial(planner.unpublished, generation=generation)
            )
        except Exception:  # the store is down too: the task's redelivery publishes it
            log.warning("could not unmark a result", extra={"flow_id": record.flow_id})

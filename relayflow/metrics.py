"""What operators chart and alert on, as OpenTelemetry metrics.

The engine reports what happened through a ``Metrics`` object: flows started and ended, each
handler run with its duration and outcome, retries, claim conflicts, sweeper rescues, the age
of the oldest overdue flow, rejected messages. The base class (``relayflow.core.metrics``,
beside the engine; importable from here too) does nothing, so with metrics off
(``RELAYFLOW_METRICS_EXPORTER=none``, the default) nothing is measured, nothing of the
OpenTelemetry SDK is imported and nothing is exported.

``configure_metrics`` builds the real one: the same instruments, exported to Cloud Monitoring
(``gcp``, as ``workload.googleapis.com/<name>``, the names the Terraform alerts and dashboard
use), printed to stderr (``console``), or only kept in memory (``local``). In every mode but
``none`` the current values are also readable as JSON on each service's ``GET /metrics``
(``snapshot``).

| name | kind | labels |
|---|---|---|
| relayflow.flows.started | counter | flow, tenant |
| relayflow.flows.ended | counter | flow, status, code |
| relayflow.step.duration | histogram, s | flow, step, kind, outcome |
| relayflow.flow.polls | histogram (polls per ended flow) | flow, status |
| relayflow.step.retries | counter | flow, step, code |
| relayflow.claim.conflicts | counter | flow, step |
| relayflow.sweeper.rescues | counter | flow |
| relayflow.sweeper.oldest_overdue_age | gauge, s | flow |
| relayflow.messages.rejected | counter | flow, code |
| relayflow.breaker.state | gauge (0 closed, 1 half-open, 2 open) | dependency |
| relayflow.breaker.transitions | counter | dependency, to |
| relayflow.dependency.deferred | counter | dependency, reason (open, half_open, budget) |
| relayflow.dependency.calls | counter | dependency, outcome (ok, failed) |
| relayflow.tenant.waiting | gauge (flows waiting for their tenant's quota) | tenant |
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.metrics import CallbackOptions, Observation
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricReader

    from relayflow.core.ports import Unreadable
    from relayflow.core.position import Position
    from relayflow.core.records import FlowRecord
    from relayflow.settings import Settings

from relayflow.core.metrics import Metrics

METER_NAME = "relayflow"
# A flow label for what names no flow (a message that did not parse); never a raw value from
# a message, which would let a publisher mint unbounded label values.
NO_FLOW = "unknown"
STEP_SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
POLLS_BUCKETS = (0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89)
# A sweep's overdue ages are reported this long after it ran, then no more: the instance that
# swept last is the one that knows, and an idle instance must not repeat an old figure for
# its whole life (the alert takes the max over instances).
OVERDUE_STALE_AFTER_S = 300.0


class OtelMetrics(Metrics):
    """The instruments, on an OpenTelemetry meter provider of their own."""

    enabled = True

    def __init__(self, provider: MeterProvider, *, reader: InMemoryMetricReader | None = None):
        self._provider = provider
        self._reader = reader  # what GET /metrics reads; None: not readable here
        meter = provider.get_meter(METER_NAME)
        self._started = meter.create_counter("relayflow.flows.started", "1", "Flows started.")
        self._ended = meter.create_counter("relayflow.flows.ended", "1", "Flows ended.")
        self._cleanups = meter.create_counter(
            "relayflow.cleanups.ended", "1", "Clean-ups of ended flows over, by state."
        )
        self._abandoned = meter.create_counter(
            "relayflow.cleanups.abandoned",
            "1",
            "Clean-ups given up: a failed flow may have left an effect live.",
        )
        self._duration = meter.create_histogram(
            "relayflow.step.duration",
            "s",
            "Duration of one handler run (action, poll or compensation).",
            explicit_bucket_boundaries_advisory=STEP_SECONDS_BUCKETS,
        )
        self._polls = meter.create_histogram(
            "relayflow.flow.polls",
            "1",
            "Polls per ended flow.",
            explicit_bucket_boundaries_advisory=POLLS_BUCKETS,
        )
        self._retries = meter.create_counter("relayflow.step.retries", "1", "Step retries.")
        self._conflicts = meter.create_counter(
            "relayflow.claim.conflicts", "1", "Deliveries that found the step claimed."
        )
        self._rescues = meter.create_counter(
            "relayflow.sweeper.rescues", "1", "Lost tasks the sweeper re-enqueued."
        )
        self._rejected = meter.create_counter(
            "relayflow.messages.rejected", "1", "Messages refused and recorded in rejected."
        )
        self._transitions = meter.create_counter(
            "relayflow.breaker.transitions", "1", "Breaker transitions, by the state entered."
        )
        self._deferred = meter.create_counter(
            "relayflow.dependency.deferred", "1", "Steps put off by a breaker or a budget."
        )
        self._calls = meter.create_counter(
            "relayflow.dependency.calls", "1", "Calls of a dependency, by outcome."
        )
        self._breakers = LastValues()
        meter.create_observable_gauge(
            "relayflow.breaker.state",
            [self._breakers.observe],
            "1",
            "A dependency's breaker as last seen: 0 closed, 1 half-open, 2 open.",
        )
        self._waiting = LastValues()
        meter.create_observable_gauge(
            "relayflow.tenant.waiting",
            [self._waiting.observe],
            "1",
            "Flows waiting for their tenant's quota, as the last sweep counted.",
        )
        self._overdue = OverdueAges()
        meter.create_observable_gauge(
            "relayflow.sweeper.oldest_overdue_age",
            [self._overdue.observe],
            "s",
            "Age of the oldest overdue active flow the last sweep saw.",
        )

    def flow_started(self, flow: str, tenant: str = "default") -> None:
        self._started.add(1, {"flow": flow, "tenant": tenant})

    def flow_ended(self, record: FlowRecord) -> None:
        code = record.result.code if record.result else ""
        status = str(record.status)
        self._ended.add(1, {"flow": record.flow, "status": status, "code": code})
        self._polls.record(record.polls, {"flow": record.flow, "status": status})

    def cleanup_ended(self, record: FlowRecord, tenant: str = "default") -> None:
        state = str(record.cleanup.state) if record.cleanup is not None else ""
        self._cleanups.add(1, {"flow": record.flow, "tenant": tenant, "state": state})
        if state == "abandoned":
            self._abandoned.add(1, {"flow": record.flow, "tenant": tenant})

    def step_ran(self, flow: str, position: Position, outcome: str, duration_s: float) -> None:
        labels = {"flow": flow, "step": position.step, "kind": str(position.kind)}
        self._duration.record(duration_s, {**labels, "outcome": outcome})

    def step_retried(self, flow: str, step: str, code: str) -> None:
        self._retries.add(1, {"flow": flow, "step": step, "code": code})

    def claim_conflict(self, flow: str, step: str) -> None:
        self._conflicts.add(1, {"flow": flow, "step": step})

    def sweeper_rescued(self, flow: str) -> None:
        self._rescues.add(1, {"flow": flow})

    def sweep_found(self, overdue: Sequence[FlowRecord | Unreadable], *, now: datetime) -> None:
        self._overdue.update(oldest_overdue(overdue, now=now))

    def message_rejected(self, flow: str, code: str) -> None:
        self._rejected.add(1, {"flow": flow or NO_FLOW, "code": code})

    def breaker_changed(self, dependency: str, to: str) -> None:
        self._transitions.add(1, {"dependency": dependency, "to": to})

    def breaker_state(self, dependency: str, state: str) -> None:
        self._breakers.set("dependency", dependency, BREAKER_LEVELS.get(state, 0))

    def dependency_deferred(self, dependency: str, reason: str) -> None:
        self._deferred.add(1, {"dependency": dependency, "reason": reason})

    def dependency_called(self, dependency: str, ok: bool) -> None:
        self._calls.add(1, {"dependency": dependency, "outcome": "ok" if ok else "failed"})

    def tenants_waiting(self, waiting: Mapping[str, int]) -> None:
        for tenant, count in waiting.items():
            self._waiting.set("tenant", tenant, count)

    def snapshot(self) -> dict[str, Any] | None:
        if self._reader is None:
            return None
        return snapshot(self._reader)

    def shutdown(self) -> None:
        """Export what is pending and stop the exporters' threads."""
        self._provider.shutdown()


BREAKER_LEVELS = {"closed": 0, "half_open": 1, "open": 2}


class LastValues:
    """The last value set for each label value, read by an observable gauge's callback."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[tuple[str, str], float] = {}

    def set(self, label: str, value: str, level: float) -> None:
        with self._lock:
            self._values[(label, value)] = level

    def observe(self, _: CallbackOptions | None = None) -> Iterable[Observation]:
        from opentelemetry.metrics import Observation

        with self._lock:
            return [Observation(v, {label: name}) for (label, name), v in self._values.items()]


class OverdueAges:
    """The last sweep's oldest overdue age per flow type, read by the gauge's callback."""

    def __init__(self, *, stale_after_s: float = OVERDUE_STALE_AFTER_S) -> None:
        self._lock = threading.Lock()
        self._ages: dict[str, float] = {}
        self._at = float("-inf")
        self._stale_after_s = stale_after_s

    def update(self, ages: Mapping[str, float]) -> None:
        with self._lock:
            # A type seen overdue before and not now is reported as 0, so its alert resolves.
            self._ages = {flow: 0.0 for flow in self._ages} | dict(ages)
            self._at = time.monotonic()

    def observe(self, _: CallbackOptions | None = None) -> Iterable[Observation]:
        from opentelemetry.metrics import Observation

        with self._lock:
            if time.monotonic() - self._at > self._stale_after_s:
                return []
            return [Observation(age, {"flow": flow}) for flow, age in self._ages.items()]


def oldest_overdue(
    overdue: Iterable[FlowRecord | Unreadable], *, now: datetime
) -> dict[str, float]:
    """Seconds since the oldest overdue flow of each type was due.

    Due means its task's own ``run_at``: the sweeper moves ``next_run_at`` ahead when it sets
    a flow aside, which must not make a stuck flow look young again.
    """
    from relayflow.core.records import FlowRecord

    ages: dict[str, float] = {}
    for found in overdue:
        if not isinstance(found, FlowRecord) or found.next is None:
            continue  # an unreadable document has no type to report under
        age = max(0.0, (now - found.next.run_at).total_seconds())
        ages[found.flow] = max(age, ages.get(found.flow, 0.0))
    return ages


def configure_metrics(settings: Settings, *, service: str) -> Metrics:
    """The metrics ``settings.metrics_exporter`` asks for; ``Metrics()`` (nothing) for none."""
    if settings.metrics_exporter == "none":
        return Metrics()
    # Imported here so that a process with metrics off never loads the SDK.
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    local = InMemoryMetricReader()
    readers: list[MetricReader] = [local]
    if settings.metrics_exporter != "local":
        readers.append(_exporting_reader(settings))
    provider = MeterProvider(metric_readers=readers, resource=_resource(settings, service))
    return OtelMetrics(provider, reader=local)


def _exporting_reader(settings: Settings) -> MetricReader:
    from opentelemetry.sdk.metrics.export import (
        ConsoleMetricExporter,
        MetricExporter,
        PeriodicExportingMetricReader,
    )

    exporter: MetricExporter
    if settings.metrics_exporter == "gcp":
        from opentelemetry.exporter.cloud_monitoring import CloudMonitoringMetricsExporter

        # workload.googleapis.com/<name>: the metric types the Terraform alerts name.
        exporter = CloudMonitoringMetricsExporter(project_id=settings.project_id)
    else:
        # stderr, one line per export: stdout is for JSON log lines only.
        exporter = ConsoleMetricExporter(
            out=sys.stderr, formatter=lambda data: data.to_json(indent=None) + "\n"
        )
    interval_ms = settings.metrics_export_interval_s * 1000
    return PeriodicExportingMetricReader(exporter, export_interval_millis=interval_ms)


def _resource(settings: Settings, service: str) -> Any:
    """The service's resource; on Google Cloud, what the detector finds (Cloud Run: the
    instance), so that each instance writes series of its own."""
    from opentelemetry.sdk.resources import Resource

    resource = Resource.create({"service.name": service, "gcp.project_id": settings.project_id})
    if settings.metrics_exporter != "gcp":
        return resource
    from opentelemetry.resourcedetector.gcp_resource_detector import (
        GoogleCloudResourceDetector,
    )

    return GoogleCloudResourceDetector(raise_on_error=False).detect().merge(resource)


def snapshot(reader: InMemoryMetricReader) -> dict[str, Any]:
    """The reader's current values as plain JSON: ``{name: {unit, points: [...]}}``."""
    from opentelemetry.sdk.metrics.export import HistogramDataPoint, NumberDataPoint

    found: dict[str, Any] = {}
    data = reader.get_metrics_data()
    for resource_metrics in data.resource_metrics if data else ():
        for scope in resource_metrics.scope_metrics:
            for metric in scope.metrics:
                points = []
                for point in metric.data.data_points:
                    labels = {k: str(v) for k, v in (point.attributes or {}).items()}
                    if isinstance(point, HistogramDataPoint):
                        points.append({"labels": labels, **_histogram(point)})
                    elif isinstance(point, NumberDataPoint):
                        points.append({"labels": labels, "value": point.value})
                found[metric.name] = {"unit": metric.unit, "points": points}
    return found


def _histogram(point: Any) -> dict[str, Any]:
    bounds = [*(str(b) for b in point.explicit_bounds), "+Inf"]
    return {
        "count": point.count,
        "sum": point.sum,
        "min": point.min,
        "max": point.max,
        "buckets": dict(zip(bounds, point.bucket_counts, strict=True)),
    }


__all__ = [
    "LastValues",
    "Metrics",
    "OtelMetrics",
    "OverdueAges",
    "configure_metrics",
    "oldest_overdue",
    "snapshot",
]

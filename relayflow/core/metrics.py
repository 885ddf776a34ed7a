"""What the engine reports happened, as no-op bases: ``Metrics`` (everything the engine counts)
and ``BreakerMetrics`` (what the breakers count, a part of it).

These do nothing, so with metrics off nothing is measured and nothing of the OpenTelemetry SDK
is imported. The instruments that count are ``relayflow.metrics.OtelMetrics``, which an entry
point builds (``relayflow.metrics.configure_metrics``) and hands the engine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from relayflow.core.ports import Unreadable
    from relayflow.core.position import Position
    from relayflow.core.records import FlowRecord


class BreakerMetrics(Protocol):
    """What the breakers report (``Metrics`` does it all)."""

    def breaker_changed(self, dependency: str, to: str) -> None: ...

    def dependency_deferred(self, dependency: str, reason: str) -> None: ...

    def dependency_called(self, dependency: str, ok: bool) -> None: ...

    def breaker_state(self, dependency: str, state: str) -> None: ...


class Metrics:
    """Where the engine reports what happened. This base does nothing: metrics off."""

    enabled = False

    def flow_started(self, flow: str, tenant: str = "default") -> None:
        """A start message created a flow."""

    def flow_ended(self, record: FlowRecord) -> None:
        """A flow's end was committed and announced (once per generation)."""

    def cleanup_ended(self, record: FlowRecord, tenant: str = "default") -> None:
        """An ended flow's clean-up was over (done or abandoned) and announced; ``tenant`` is
        the tenant's metric label."""

    def step_ran(self, flow: str, position: Position, outcome: str, duration_s: float) -> None:
        """A handler (action, poll or compensation) ran and ended with ``outcome``."""

    def step_retried(self, flow: str, step: str, code: str) -> None:
        """A handler raised a retryable error: the step is tried (or polled) again."""

    def claim_conflict(self, flow: str, step: str) -> None:
        """A delivery found another delivery holding the step's claim (answered 409)."""

    def sweeper_rescued(self, flow: str) -> None:
        """The sweeper re-enqueued a flow whose next task was lost."""

    def sweep_found(self, overdue: Sequence[FlowRecord | Unreadable], *, now: datetime) -> None:
        """What a sweep found overdue, for the age of the oldest overdue flow of each type."""

    def message_rejected(self, flow: str, code: str) -> None:
        """A message was refused and recorded in ``rejected``."""

    def breaker_changed(self, dependency: str, to: str) -> None:
        """This process moved a dependency's breaker to ``to``."""

    def breaker_state(self, dependency: str, state: str) -> None:
        """This process saw a dependency's breaker in ``state``."""

    def dependency_deferred(self, dependency: str, reason: str) -> None:
        """A step was put off: its dependency's breaker open or half-open, or budget spent."""

    def dependency_called(self, dependency: str, ok: bool) -> None:
        """A step called its dependency; ``ok`` unless it failed retryably."""

    def tenants_waiting(self, waiting: Mapping[str, int]) -> None:
        """How many flows of each tenant wait for room (the sweeper counts them)."""

    def snapshot(self) -> dict[str, Any] | None:
        """The current values, for ``GET /metrics``; None when metrics are off."""
        return None

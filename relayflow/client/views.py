"""What the client hands back besides handles: a flow's status, a page of flows, a callback's
outcome, and the errors a wait ends with. Plain frozen values built from the api's JSON."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from relayflow.client.waiters import FlowResult
from relayflow.core.errors import RelayflowError
from relayflow.core.state import Status


@dataclass(frozen=True)
class FlowStatus:
    """Where a flow is (its document, as the api shows it to the caller)."""

    flow_id: str
    tenant: str
    flow: str
    status: Status
    generation: int
    step: str
    kind: str
    attempt: int
    poll: int
    result: FlowResult | None
    document: Mapping[str, Any] = field(repr=False, compare=False)
    labels: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> FlowStatus:
        position = doc.get("position") or {}
        return cls(
            flow_id=str(doc["flow_id"]),
            tenant=str(doc.get("tenant") or "default"),
            flow=str(doc.get("flow") or ""),
            status=Status(str(doc["status"])),
            generation=int(position.get("generation") or 0),
            step=str(position.get("step") or ""),
            kind=str(position.get("kind") or ""),
            attempt=int(position.get("attempt") or 0),
            poll=int(position.get("poll") or 0),
            result=FlowResult.from_document(doc),
            document=doc,
            labels={str(k): str(v) for k, v in (doc.get("labels") or {}).items()},
        )

    @property
    def ended(self) -> bool:
        return self.result is not None

    def where(self) -> str:
        """``RUNNING at step 'await' (poll, attempt 0, poll 3, generation 0)``."""
        return (
            f"{self.status} at step {self.step!r} ({self.kind}, attempt {self.attempt}, "
            f"poll {self.poll}, generation {self.generation})"
        )


@dataclass(frozen=True)
class FlowPage:
    """One page of ``Client.list``: summaries (or whole documents with ``view="full"``)."""

    flows: list[dict[str, Any]]
    next_cursor: str | None
    counts: dict[str, int] | None = None


@dataclass(frozen=True)
class CallbackOutcome:
    """What completing a callback token did: ``completed`` (the step goes on), ``kept`` (it
    completed early, before its step waited: kept for it) or ``ignored`` (no flow waits for
    the token any more: it ended, or the token was completed already), and why."""

    outcome: str
    flow_id: str | None
    reason: str


class FlowFailed(RelayflowError):
    """Raised by ``result()`` when the flow ended other than SUCCEEDED; ``result`` says how."""

    def __init__(self, result: FlowResult) -> None:
        super().__init__(
            f"flow {result.flow_id} ended {result.status} ({result.code}): {result.message}"
        )
        self.result = result

    @property
    def status(self) -> Status:
        return self.result.status


class WaitTimeout(RelayflowError, TimeoutError):
    """Raised when a flow did not end within the wait's timeout; says where it is
    (``position``: its status now, or None if no flow has the id yet)."""

    def __init__(self, message: str, position: FlowStatus | None) -> None:
        super().__init__(message)
        self.position = position

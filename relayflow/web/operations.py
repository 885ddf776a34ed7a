"""What the api and its console share: the objects they work with (``Operations``), the guard
that identifies each caller and checks their role (``guarded``), and how each refusal is
answered (``refusal``). Both surfaces import this; neither imports the other's routes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flask import g, request

from relayflow.core.bulk_runner import BulkRunner
from relayflow.core.dead_letters import DeadLetters
from relayflow.core.engine import Engine
from relayflow.core.errors import (
    AmbiguousFlow,
    BulkNotFound,
    BulkRefused,
    DeadLetterNotFound,
    FlowNotFound,
    InvalidTransition,
    PayloadCorrupt,
    PayloadMissing,
    PayloadUnavailable,
    RelayflowError,
    Unauthorized,
    UnknownSchedule,
    UnknownTenant,
    VerifierUnavailable,
)
from relayflow.core.flows import Registry
from relayflow.core.listing import Uncountable
from relayflow.core.metrics import Metrics
from relayflow.core.ports import Listing
from relayflow.core.scheduler import Scheduler
from relayflow.core.sealing import Sealing
from relayflow.telemetry import Counters
from relayflow.web import params
from relayflow.web.access import Access, Caller, Forbidden, Role
from relayflow.web.guard import RequestGuard
from relayflow.web.longpoll import Watch

View = Callable[..., Any]
Guard = Callable[[View], View]

# How each refusal is answered: HTTP status and Google's status name.
ERRORS: dict[type[RelayflowError], tuple[int, str]] = {
    params.BadRequest: (400, "INVALID_ARGUMENT"),
    params.UnsupportedMediaType: (415, "UNSUPPORTED_MEDIA_TYPE"),
    Unauthorized: (401, "UNAUTHENTICATED"),
    VerifierUnavailable: (503, "UNAVAILABLE"),
    Forbidden: (403, "PERMISSION_DENIED"),
    FlowNotFound: (404, "NOT_FOUND"),
    DeadLetterNotFound: (404, "NOT_FOUND"),
    InvalidTransition: (409, "FAILED_PRECONDITION"),
    AmbiguousFlow: (400, "INVALID_ARGUMENT"),
    UnknownSchedule: (404, "NOT_FOUND"),
    BulkNotFound: (404, "NOT_FOUND"),
    BulkRefused: (409, "FAILED_PRECONDITION"),
    UnknownTenant: (404, "NOT_FOUND"),
    Uncountable: (400, "INVALID_ARGUMENT"),
    PayloadMissing: (409, "PAYLOAD_MISSING"),
    PayloadCorrupt: (409, "PAYLOAD_CORRUPT"),
    PayloadUnavailable: (503, "UNAVAILABLE"),
    params.PayloadTooLarge: (413, "PAYLOAD_TOO_LARGE"),
}


@dataclass(frozen=True)
class Operations:
    """What the api works with: from the runtime in the service, in-memory fakes in tests."""

    engine: Engine
    store: Listing
    access: Access
    dead_letters: DeadLetters
    counters: Counters
    metrics: Metrics
    # The deployed flow definitions: the console draws poll waits against their curves.
    registry: Registry | None = None
    # Which pages may change state, and (token verification off) which hosts it answers.
    guard: RequestGuard = field(default_factory=RequestGuard)
    # Follows a flow's document for the long-poll (GET /flows/{id}?wait_s=); None: no waits.
    watch: Watch | None = None
    # The deployed app's schedules (None: the api shows none).
    scheduler: Scheduler | None = None
    # Opens flows' sealed values for the callers who may read them (None: nobody does).
    sealing: Sealing | None = None
    # Bulk actions over the flows (None: the api makes none).
    bulk: BulkRunner | None = None


def guarded(access: Access, role: Role, action: str, *, unscoped: bool = False) -> Guard:
    """Identify the caller (``g.caller``) and refuse one whose role may not ``action`` (or,
    with ``unscoped``, one scoped to tenants: what ``action`` reads spans them all)."""

    def wrap(view: View) -> View:
        @functools.wraps(view)
        def checked(*args: Any, **kwargs: Any) -> Any:
            caller = access.caller(request.headers.get("Authorization"), request.remote_addr)
            access.require(caller, role, action)
            if unscoped:
                caller.unscoped(action)
            g.caller = caller
            return view(*args, **kwargs)

        return checked

    return wrap


def caller() -> Caller:
    """The caller ``guarded`` identified for this request."""
    found: Caller = g.caller
    return found


def tenants_seen(ops: Operations, viewer: Caller) -> list[dict[str, Any]]:
    """Every tenant's view (``Engine.tenant_views``) that ``viewer`` may see."""
    return [view for view in ops.engine.tenant_views() if viewer.sees(view["tenant"])]


def refusal(exc: RelayflowError) -> tuple[int, str]:
    """The HTTP status and status name ``exc`` is answered with."""
    return next((v for t, v in ERRORS.items() if isinstance(exc, t)), (500, "INTERNAL"))

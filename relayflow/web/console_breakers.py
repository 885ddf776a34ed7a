"""The console's breakers page: each dependency's circuit breaker (closed, open, half-open,
since when, when an open one probes again), its failure rate over its window against the rate
that opens it, its retry budget (retries against what the window allows), p95 latency, the
flows it holds up now, and its transitions with why. Read only, for viewers:
``Engine.breaker_views``, as the api's ``GET /breakers`` and ``relayflow breakers`` show it."""

from __future__ import annotations

from datetime import UTC, datetime

from flask import Blueprint, g, render_template

from relayflow.core.listing import FlowFilter
from relayflow.core.state import ACTIVE
from relayflow.web.access import Caller, Role
from relayflow.web.operations import Operations, guarded

# Transitions shown per breaker, newest first; the older ones its document keeps (up to 20)
# fold away: a breaker probing a dependency still down adds two a round.
SHOWN_TRANSITIONS = 6


def register(bp: Blueprint, ops: Operations) -> None:
    """``/console/breakers``."""

    @bp.get("/breakers")
    @guarded(ops.access, Role.VIEWER, "read breakers")
    def breakers() -> str:
        views = ops.engine.breaker_views()
        return render_template(
            "console/breakers.html",
            breakers=views,
            held_up={v["dependency"]: held_up(ops, g.caller, v["dependency"]) for v in views},
            shown_transitions=SHOWN_TRANSITIONS,
            now=datetime.now(UTC),
        )


def held_up(ops: Operations, viewer: Caller, dependency: str) -> int:
    """How many flows not ended ``dependency`` holds up now (a step of theirs put off for its
    breaker or budget: the flow's ``dependency``), of the tenants ``viewer`` sees: a round of
    count aggregations per tenant it is scoped to, one for an unscoped viewer."""
    tenants = sorted(viewer.tenants) if viewer.tenants is not None else [None]
    counts = [
        ops.store.count_by_status(FlowFilter(tenant=t, dependency=dependency)) for t in tenants
    ]
    return sum(count[status] for count in counts for status in ACTIVE)

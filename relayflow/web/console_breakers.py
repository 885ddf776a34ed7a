"""The console's breakers page: each dependency's circuit breaker (closed, open, half-open,
since when, when an open one probes again), its failure rate over its window against the rate
that opens it, its retry budget (retries against what the window allows), p95 latency and
its transitions with why. Read only, for viewers: ``Engine.breaker_views``, as the api's
``GET /breakers`` and ``relayflow breakers`` show it."""

from __future__ import annotations

from datetime import UTC, datetime

from flask import Blueprint, render_template

from relayflow.web.access import Role
from relayflow.web.operations import Operations, guarded

# Transitions shown per breaker, newest first; the older ones its document keeps (up to 20)
# fold away: a breaker probing a dependency still down adds two a round.
SHOWN_TRANSITIONS = 6


def register(bp: Blueprint, ops: Operations) -> None:
    """``/console/breakers``."""

    @bp.get("/breakers")
    @guarded(ops.access, Role.VIEWER, "read breakers")
    def breakers() -> str:
        return render_template(
            "console/breakers.html",
            breakers=ops.engine.breaker_views(),
            shown_transitions=SHOWN_TRANSITIONS,
            now=datetime.now(UTC),
        )

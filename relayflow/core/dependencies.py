"""Temporary: the old home of the breakers, kept importable until relayflow.core.engine (being
rewritten as a package) imports from the new ones; then this module goes.

The breakers at run time are ``relayflow.core.breakers``; their configuration
``relayflow.core.breaker_policy``; their stored state, counts and store port
``relayflow.core.breaker_state``.
"""

from __future__ import annotations

from relayflow.core.breaker_policy import BreakerPolicy, Dependencies
from relayflow.core.breaker_state import (
    Breaker,
    BreakerState,
    BreakerStore,
    Counts,
    Transition,
    state_doc,
    state_from_doc,
)
from relayflow.core.breakers import Breakers, Verdict

__all__ = [
    "Breaker",
    "BreakerPolicy",
    "BreakerState",
    "BreakerStore",
    "Breakers",
    "Counts",
    "Dependencies",
    "Transition",
    "Verdict",
    "state_doc",
    "state_from_doc",
]

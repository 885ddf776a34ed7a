"""The kinds of step, one module each, registered in one table (see ``kinds.base``)."""

from __future__ import annotations

from relayflow.core.kinds.action import Action
from relayflow.core.kinds.base import Kind, Kinds, step_at
from relayflow.core.kinds.callback import Callback
from relayflow.core.kinds.child import Child
from relayflow.core.kinds.choice import Choice
from relayflow.core.kinds.foreach import Items
from relayflow.core.kinds.poll import Poll
from relayflow.core.kinds.signal import SignalWait
from relayflow.core.kinds.sleep import Sleeper

REGISTRY = Kinds(
    (Action(), Poll(), Choice(), Callback(), Sleeper(), SignalWait(), Items(), Child())
)

__all__ = [
    "REGISTRY",
    "Action",
    "Callback",
    "Child",
    "Choice",
    "Items",
    "Kind",
    "Kinds",
    "Poll",
    "SignalWait",
    "Sleeper",
    "step_at",
]

"""Scripted handlers and an engine over relayflow.testing's in-memory ports, for unit tests
that drive the engine task by task."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.trace import Tracer

from relayflow.core.clock import FakeClock
from relayflow.core.engine import Engine
from relayflow.core.flows import Flow, Registry, StepContext
from relayflow.core.planner import QueueNames
from relayflow.testing import MemoryEvents, MemoryQueue, MemoryStore

FakeStore = MemoryStore
FakeQueue = MemoryQueue
FakeEvents = MemoryEvents

Scripted = dict[str, Any] | Exception | Callable[[StepContext], dict[str, Any]]


@dataclass
class ScriptedHandler:
    """A step handler that plays a script, one entry per call, repeating the last entry.

    An entry is returned if it is a dict, raised if it is an exception, called if it is a
    function. Every context the handler was called with is kept in ``calls``.
    """

    script: list[Scripted]
    calls: list[StepContext] = field(default_factory=list)

    def __call__(self, ctx: StepContext) -> dict[str, Any]:
        self.calls.append(ctx)
        entry = self.script[min(len(self.calls), len(self.script)) - 1]
        if isinstance(entry, Exception):
            raise entry
        if callable(entry):
            return entry(ctx)
        return entry


def engine_over(
    flow: Flow,
    *,
    store: MemoryStore,
    queue: MemoryQueue,
    events: MemoryEvents,
    clock: FakeClock,
    tracer: Tracer | None = None,
) -> Engine:
    """An Engine running ``flow`` over the in-memory ports (queues named q-steps and q-polls)."""
    return Engine(
        registry=Registry((flow,)),
        store=store,
        queue=queue,
        events=events,
        clock=clock,
        queues=QueueNames(steps="q-steps", polls="q-polls"),
        tracer=tracer,
    )

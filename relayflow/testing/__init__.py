"""Test flows in milliseconds, without an emulator: the real planner and engine over in-memory
ports, with a virtual clock that jumps to the next due task.

    from relayflow.testing import Harness, scripted

    def test_charge_retries_after_429():
        h = Harness(build_registry(Settings()))
        h.script("charge", RetryableError("429", retry_after_s=30), {"charge_id": "c-1"})
        flow_id = h.start("orders", {"sku": "A-1", "amount_cents": 1200})
        assert h.run(flow_id).status == "SUCCEEDED"
        assert len(h.calls_of("charge")) == 2

``MemoryStore``, ``MemoryQueue`` and ``MemoryEvents`` are the in-memory ports, for tests that
build an Engine themselves; ``MemorySealer`` seals flows' sensitive fields (AES-SIV, a key in
memory), as every ``Harness`` does by default (``h.opened(flow_id)``: the document as its
handlers see it).
"""

from relayflow.testing.harness import START, Call, Crash, Harness, Scripted, scripted
from relayflow.testing.memory import MemoryEvents, MemoryQueue, MemoryStore, QueuedTask
from relayflow.testing.sealer import MemorySealer

__all__ = [
    "START",
    "Call",
    "Crash",
    "Harness",
    "MemoryEvents",
    "MemoryQueue",
    "MemorySealer",
    "MemoryStore",
    "QueuedTask",
    "Scripted",
    "scripted",
]

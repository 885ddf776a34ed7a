"""In-memory implementations of the engine's ports (Store, Queue, Events, Breakers, Blobs) and
of the bulk actions' (BulkStore, BulkQueue).

They behave like the real services in the ways the engine relies on: a flow document is
written whole and goes through its Firestore form on every write; a conditional write against
a stale version is re-read; a task name, once used, is never accepted again (Cloud Tasks
answers ALREADY_EXISTS for it); the sweeper's overdue query is sorted by ``next_run_at`` as
Firestore sorts it. What they were asked is kept in plain lists and dicts a test can read.

The store is split as ``relayflow.gcp.store`` is, one module per family of ``core.ports``
over the shared dicts of ``base``; ``MemoryStore`` is all of them.
"""

from __future__ import annotations

from relayflow.testing.memory.base import EPOCH
from relayflow.testing.memory.blobs import MemoryBlobs
from relayflow.testing.memory.breakers import MemoryBreakers
from relayflow.testing.memory.bulk import MemoryBulkQueue, MemoryBulkStore, QueuedBatch
from relayflow.testing.memory.events import MemoryEvents
from relayflow.testing.memory.flow_documents import MemoryFlowDocuments
from relayflow.testing.memory.listing import MemoryListing
from relayflow.testing.memory.queue import MemoryQueue, QueuedTask
from relayflow.testing.memory.recovery import MemoryRecovery
from relayflow.testing.memory.rejections import MemoryRejections
from relayflow.testing.memory.schedule_states import MemoryScheduleStates
from relayflow.testing.memory.tenant_slots import MemoryTenantSlots
from relayflow.testing.memory.tenant_states import MemoryTenantStates


class MemoryStore(
    MemoryFlowDocuments,
    MemoryRecovery,
    MemoryTenantSlots,
    MemoryTenantStates,
    MemoryListing,
    MemoryRejections,
):
    """Flow documents and rejected-message records in dicts, changed whole like Firestore:
    every family of the store (``core.ports.Store``)."""


__all__ = [
    "EPOCH",
    "MemoryBlobs",
    "MemoryBreakers",
    "MemoryBulkQueue",
    "MemoryBulkStore",
    "MemoryEvents",
    "MemoryFlowDocuments",
    "MemoryListing",
    "MemoryQueue",
    "MemoryRecovery",
    "MemoryRejections",
    "MemoryScheduleStates",
    "MemoryStore",
    "MemoryTenantSlots",
    "MemoryTenantStates",
    "QueuedBatch",
    "QueuedTask",
]

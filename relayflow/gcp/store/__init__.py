"""Flow state in Firestore: ``flows/{flow_id}`` documents, changed only by compare-and-set, and
what sits beside them (ForEach lanes, tenant slots and states, rejected messages).

One module per family of ``core.ports`` (``flow_documents``, ``recovery``, ``tenant_slots``,
``tenant_states``, ``listing``, ``rejections``), each a class over the shared collections of
``base``; ``FlowStore`` is all of them over one client, what the composition root builds.
"""

from __future__ import annotations

from relayflow.gcp.store.base import RPC_TIMEOUT_S, build_client
from relayflow.gcp.store.flow_documents import CHANGE_ATTEMPTS, FirestoreFlowDocuments
from relayflow.gcp.store.listing import FirestoreListing
from relayflow.gcp.store.migration import FirestoreMigration, MigrationReport
from relayflow.gcp.store.recovery import FirestoreRecovery
from relayflow.gcp.store.rejections import FirestoreRejections
from relayflow.gcp.store.tenant_slots import FirestoreTenantSlots
from relayflow.gcp.store.tenant_states import FirestoreTenantStates


class FlowStore(
    FirestoreFlowDocuments,
    FirestoreRecovery,
    FirestoreTenantSlots,
    FirestoreTenantStates,
    FirestoreListing,
    FirestoreRejections,
    FirestoreMigration,
):
    """Every family of the store (``core.ports.Store``) over one client and its collections:
    reads and compare-and-set writes of flow documents, the sweeper's queries, tenants' slots
    and states, listings, and the ``rejected`` records."""


__all__ = [
    "CHANGE_ATTEMPTS",
    "RPC_TIMEOUT_S",
    "FirestoreFlowDocuments",
    "FirestoreListing",
    "FirestoreMigration",
    "FirestoreRecovery",
    "FirestoreRejections",
    "FirestoreTenantSlots",
    "FirestoreTenantStates",
    "FlowStore",
    "MigrationReport",
    "build_client",
]

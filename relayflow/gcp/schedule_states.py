"""Schedules' documents in Firestore: ``schedules/{name}`` (``core.schedule_state``), each
changed by compare-and-set on its update time, so two tick runs at once (or a tick run and an
operator's pause) never lose each other's writes: the second is refused and reads again.

A document is small and bounded (MAX_RUNS runs), and there is one per schedule: a tick run
reads each once a minute, far below Firestore's sustained one write a second per document
(https://cloud.google.com/firestore/docs/best-practices#updates_to_a_single_document).
"""

from __future__ import annotations

from google.api_core.exceptions import AlreadyExists, FailedPrecondition, NotFound
from google.cloud import firestore

from relayflow.core.schedule_state import ScheduleState
from relayflow.gcp.store import RPC_TIMEOUT_S
from relayflow.telemetry import Counters

SCHEDULES_COLLECTION = "schedules"


class FirestoreScheduleStates:
    """``core.schedule_state.ScheduleStates`` over one Firestore collection."""

    def __init__(
        self,
        client: firestore.Client,
        *,
        collection: str = SCHEDULES_COLLECTION,
        counters: Counters | None = None,
    ) -> None:
        self._client = client
        self._schedules = client.collection(collection)
        self._counters = counters or Counters()

    def read(self, name: str) -> ScheduleState:
        snap = self._schedules.document(name).get(timeout=RPC_TIMEOUT_S)
        self._counters.add("firestore_reads")
        if not snap.exists:
            return ScheduleState(name)
        return ScheduleState.from_dict(name, snap.to_dict() or {}, snap.update_time)

    def write(self, state: ScheduleState) -> bool:
        ref = self._schedules.document(state.name)
        self._counters.add("firestore_writes")
        try:
            if state.version is None:
                ref.create(state.to_dict(), timeout=RPC_TIMEOUT_S)
            else:
                option = self._client.write_option(last_update_time=state.version)
                ref.update(state.to_dict(), option=option, timeout=RPC_TIMEOUT_S)
        except (AlreadyExists, FailedPrecondition, NotFound):
            self._counters.add("firestore_conflicts")
            return False
        return True

    def read_all(self) -> list[ScheduleState]:
        found = [
            ScheduleState.from_dict(snap.id, snap.to_dict() or {}, snap.update_time)
            for snap in self._schedules.stream(timeout=RPC_TIMEOUT_S)
        ]
        self._counters.add("firestore_reads", max(1, len(found)))
        return sorted(found, key=lambda s: s.name)

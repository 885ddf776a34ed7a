"""Breakers in Firestore: ``breakers/{dependency}`` (the state, changed by compare-and-set on
its update time) and ``breaker_windows/{dependency}.{shard}`` (the window's counts, added with
server-side increments in buckets keyed by their start, so no write reads first and no two
instances sharing a shard lose each other's counts). Each bucket also counts the additions made
in it (``flushes``, ``interval_ms``): how the instances sharing a shard pace their writes to it
(relayflow.core.breakers)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from google.api_core.exceptions import AlreadyExists, FailedPrecondition, NotFound
from google.cloud import firestore

from relayflow.core.breaker_state import BreakerState, Counts, state_doc, state_from_doc
from relayflow.gcp.store import RPC_TIMEOUT_S
from relayflow.telemetry import Counters


class FirestoreBreakers:
    """relayflow.core.breaker_state.BreakerStore over two Firestore collections."""

    def __init__(
        self,
        client: firestore.Client,
        *,
        breakers: str = "breakers",
        windows: str = "breaker_windows",
        counters: Counters | None = None,
    ) -> None:
        self._client = client
        self._breakers = client.collection(breakers)
        self._windows = client.collection(windows)
        self._counters = counters or Counters()

    def breaker(self, dependency: str) -> tuple[BreakerState, object | None]:
        snap = self._breakers.document(dependency).get(timeout=RPC_TIMEOUT_S)
        self._counters.add("firestore_reads")
        if not snap.exists:
            return BreakerState(dependency), None
        return state_from_doc(dependency, snap.to_dict()), snap.update_time

    def put_breaker(
        self, state: BreakerState, *, version: object | None
    ) -> tuple[bool, object | None]:
        ref = self._breakers.document(state.dependency)
        self._counters.add("firestore_writes")
        try:
            if version is None:
                result = ref.create(state_doc(state), timeout=RPC_TIMEOUT_S)
            else:
                option = self._client.write_option(last_update_time=version)
                result = ref.update(state_doc(state), option=option, timeout=RPC_TIMEOUT_S)
        except (AlreadyExists, FailedPrecondition, NotFound):
            self._counters.add("firestore_conflicts")
            return False, None
        return True, result.update_time

    def add_counts(
        self, dependency: str, shard: int, counts: Mapping[int, Counts], *, drop: Iterable[int]
    ) -> None:
        buckets: dict[str, Any] = {
            _key(bucket): {name: firestore.Increment(n) for name, n in added.to_doc().items()}
            for bucket, added in counts.items()
        }
        buckets |= {_key(bucket): firestore.DELETE_FIELD for bucket in drop}
        body = {"dependency": dependency, "shard": shard, "buckets": buckets}
        self._counters.add("firestore_writes")
        self._shard(dependency, shard).set(body, merge=True, timeout=RPC_TIMEOUT_S)

    def counts(self, dependency: str, shards: int) -> dict[int, Counts]:
        total: dict[int, Counts] = {}
        for shard in self.shard_counts(dependency, shards):
            for bucket, counts in shard.items():
                total.setdefault(bucket, Counts()).add(counts)
        return total

    def shard_counts(self, dependency: str, shards: int) -> list[dict[int, Counts]]:
        refs = [self._shard(dependency, k) for k in range(shards)]
        found: list[dict[int, Counts]] = [{} for _ in range(shards)]
        for snap in self._client.get_all(refs, timeout=RPC_TIMEOUT_S):
            self._counters.add("firestore_reads")
            doc = snap.to_dict() or {}
            # get_all answers in any order: the shard is the document's own field (its id's
            # tail, for one written before the field was)
            shard = doc.get("shard", snap.id.rpartition(".")[2])
            if not str(shard).isdigit() or not 0 <= int(shard) < shards:
                continue
            found[int(shard)] = _buckets(doc)
        return found

    def breakers(self) -> list[BreakerState]:
        found = []
        for snap in self._breakers.stream(timeout=RPC_TIMEOUT_S):
            self._counters.add("firestore_reads")
            found.append(state_from_doc(snap.id, snap.to_dict()))
        return found

    def _shard(self, dependency: str, shard: int) -> Any:
        return self._windows.document(f"{dependency}.{shard}")


def _buckets(doc: Mapping[str, Any]) -> dict[int, Counts]:
    found: dict[int, Counts] = {}
    for key, counts in (doc.get("buckets") or {}).items():
        if key.startswith("t") and key[1:].isdigit() and isinstance(counts, dict):
            found[int(key[1:])] = Counts.from_doc(counts)
    return found


def _key(bucket: int) -> str:
    # A letter first: a map key that is all digits would need quoting in a field path.
    return f"t{bucket}"

"""Breakers and their sharded window counts in dicts, in their stored form
(``core.breaker_state.BreakerStore``; the Firestore one is ``gcp.breakers``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from relayflow.core.breaker_state import BreakerState, Counts, state_doc, state_from_doc


class MemoryBreakers:
    """Breakers and their sharded window counts in dicts, in their stored form."""

    def __init__(self) -> None:
        self.docs: dict[str, dict[str, Any]] = {}
        self.versions: dict[str, int] = {}
        self.windows: dict[tuple[str, int], dict[int, dict[str, int]]] = {}
        self.writes = 0

    def breaker(self, dependency: str) -> tuple[BreakerState, object | None]:
        return state_from_doc(dependency, self.docs.get(dependency)), self.versions.get(dependency)

    def put_breaker(
        self, state: BreakerState, *, version: object | None
    ) -> tuple[bool, object | None]:
        if self.versions.get(state.dependency) != version:
            return False, None
        self.writes += 1
        self.docs[state.dependency] = state_doc(state)
        self.versions[state.dependency] = self.versions.get(state.dependency, 0) + 1
        return True, self.versions[state.dependency]

    def add_counts(
        self, dependency: str, shard: int, counts: Mapping[int, Counts], *, drop: Iterable[int]
    ) -> None:
        self.writes += 1
        window = self.windows.setdefault((dependency, shard), {})
        for bucket, added in counts.items():
            doc = window.setdefault(bucket, {})
            for name, n in added.to_doc().items():
                doc[name] = doc.get(name, 0) + n
        for bucket in drop:
            window.pop(bucket, None)

    def counts(self, dependency: str, shards: int) -> dict[int, Counts]:
        total: dict[int, Counts] = {}
        for shard in range(shards):
            for bucket, doc in self.windows.get((dependency, shard), {}).items():
                total.setdefault(bucket, Counts()).add(Counts.from_doc(doc))
        return total

    def breakers(self) -> list[BreakerState]:
        return [state_from_doc(name, doc) for name, doc in sorted(self.docs.items())]

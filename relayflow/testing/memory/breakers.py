"""Breakers and their sharded window counts in dicts, in their stored form
(``core.breaker_state.BreakerStore``; the Firestore one is ``gcp.breakers``)."""

from __future__ import annotations

from collections import Counter
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
        # Additions to each window document (dependency, shard): what its write rate is made of.
        self.window_writes: Counter[tuple[str, int]] = Counter()

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
        self.window_writes[(dependency, shard)] += 1
        window = self.windows.setdefault((dependency, shard), {})
        for bucket, added in counts.items():
            doc = window.setdefault(bucket, {})
            for name, n in added.to_doc().items():
                doc[name] = doc.get(name, 0) + n
        for bucket in drop:
            window.pop(bucket, None)

    def counts(self, dependency: str, shards: int) -> dict[int, Counts]:
        total: dict[int, Counts] = {}
        for shard in self.shard_counts(dependency, shards):
            for bucket, counts in shard.items():
                total.setdefault(bucket, Counts()).add(counts)
        return total

    def shard_counts(self, dependency: str, shards: int) -> list[dict[int, Counts]]:
        return [
            {b: Counts.from_doc(doc) for b, doc in self.windows.get((dependency, k), {}).items()}
            for k in range(shards)
        ]

    def breakers(self) -> list[BreakerState]:
        return [state_from_doc(name, doc) for name, doc in sorted(self.docs.items())]

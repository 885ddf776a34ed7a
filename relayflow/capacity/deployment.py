"""What a deployment's configuration says about its capacity: Firestore's indexes and shards,
the queues' shards and rates, the Cloud Run services' sizes.

Read from topology.json (``topology_parts``) and the Terraform (``relayflow.capacity.terraform``);
a key the configuration does not have means what today's main means by its absence: one shard
per queue kind, no Firestore shards.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# The field a sharded index leads with (Firestore's "sharded timestamps" solution).
SHARD_FIELD = "shard"


@dataclass(frozen=True)
class CompositeIndex:
    """A composite index of one collection: its label and its fields, in order."""

    name: str
    collection: str
    fields: tuple[str, ...]

    @property
    def shard_first(self) -> bool:
        return bool(self.fields) and self.fields[0] == SHARD_FIELD


@dataclass(frozen=True)
class Indexes:
    """Which fields keep their single-field indexes (all, but the exempted ones) and which
    composite indexes exist."""

    exempt: Mapping[str, frozenset[str]] = field(default_factory=dict)
    composites: tuple[CompositeIndex, ...] = ()

    def single_field_indexed(self, collection: str, path: str) -> bool:
        """Whether ``path`` (dotted; ``[]`` marks list elements) keeps a single-field index:
        an exemption of the field, or of a map it is inside, switches it off."""
        exempt = self.exempt.get(collection, frozenset())
        parts = path.replace("[]", "").split(".")
        return not any(".".join(parts[: i + 1]) in exempt for i in range(len(parts)))

    def composites_of(self, collection: str, path: str) -> list[CompositeIndex]:
        """The composite indexes of ``collection`` that hold ``path``."""
        return [c for c in self.composites if c.collection == collection and path in c.fields]


@dataclass(frozen=True)
class QueueKind:
    """One kind of queue (steps, polls, …): its base name, shards and configured rate."""

    kind: str
    name: str
    shards: int = 1
    max_dispatches_per_second: float = 500.0

    def holds(self, queue: str) -> bool:
        """Whether ``queue`` is this kind's: its base name, or shard i's ``{name}-{i}``."""
        if queue == self.name:
            return True
        head, _, tail = queue.rpartition("-")
        return head == self.name and tail.isdigit() and 1 <= int(tail) < self.shards


@dataclass(frozen=True)
class Service:
    """A Cloud Run service's size as the Terraform sets it."""

    name: str
    max_instances: int
    cpu: float = 1.0
    concurrency: int = 80


@dataclass(frozen=True)
class Deployment:
    """Everything the model reads from the configuration."""

    indexes: Indexes
    queues: tuple[QueueKind, ...]
    collections: Mapping[str, str]  # topology.json firestore key -> collection name
    firestore_shards: int | None = None  # None: no shard field
    services: tuple[Service, ...] = ()
    # Breaker call windows (relayflow.core.breakers): each instance adds its counts to one of
    # ``breaker_shards`` documents, pacing its flushes (every breaker_flush_s at the least,
    # breaker_max_flush_s at the most) so each document takes about breaker_writes_per_s
    # whatever the fleet's size, until a shard has more than breaker_writes_per_s x
    # breaker_max_flush_s writers (then writers / breaker_max_flush_s).
    breaker_shards: int = 4
    breaker_flush_s: float = 2.0
    breaker_writes_per_s: float = 0.6
    breaker_max_flush_s: float = 3600.0

    def queue_kind(self, queue: str) -> QueueKind | None:
        return next((q for q in self.queues if q.holds(queue)), None)

    def collection(self, key: str) -> str:
        """A collection's name by its topology key (``flows_collection`` or ``flows``)."""
        return str(self.collections.get(key, self.collections.get(f"{key}_collection", key)))

    @property
    def per_flow_collections(self) -> frozenset[str]:
        """Collections with a document per flow (or lane, or refused message): their documents
        are written over one flow's life, not by every flow."""
        keys = ("flows", "lanes", "rejected")
        return frozenset(self.collection(k) for k in keys)

    def service(self, name: str) -> Service | None:
        return next((s for s in self.services if s.name == name), None)


def _positive_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"topology.json: {what} must be a whole number >= 1, not {value!r}")
    return value


def topology_parts(
    topology: Mapping[str, Any],
) -> tuple[tuple[QueueKind, ...], dict[str, str], int | None]:
    """The queue kinds (with ``queues.<kind>.shards``, default 1), the Firestore collections and
    ``firestore.shards`` (None if absent) of a parsed topology.json."""
    queues = []
    for kind, spec in dict(topology.get("queues", {})).items():
        if kind.startswith("_"):
            continue
        shards = _positive_int(spec.get("shards", 1), f"queues.{kind}.shards")
        rate = float(spec.get("max_dispatches_per_second", 500.0))
        queues.append(QueueKind(kind, str(spec["name"]), shards, rate))
    store = dict(topology.get("firestore", {}))
    raw_shards = store.get("shards")
    collections = {
        k: str(v) for k, v in store.items() if k.endswith("_collection") and isinstance(v, str)
    }
    firestore_shards = None if raw_shards is None else _positive_int(raw_shards, "firestore.shards")
    return tuple(queues), collections, firestore_shards

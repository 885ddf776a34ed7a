"""The hotspot rules: which indexed fields and which document ids concentrate writes.

One source for the capacity model and the hotspot guard test (tests/infra/test_hotspots.py):

- a collection written at the flow rate must not keep a monotonically increasing field (every
  datetime of its document's model, and the ids callers number: ``CALLER_ORDERED``) in a
  single-field index, nor in a composite index that
  does not lead with ``shard``: each such index range takes 500 writes/s
  (https://docs.cloud.google.com/firestore/native/docs/solutions/shard-timestamp);
- the document ids the flow rate writes must not follow the order they are written in: writes
  to lexicographically close ids share a tablet
  (https://docs.cloud.google.com/firestore/docs/best-practices#high_read_write_and_delete_rates_to_a_narrow_document_range).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from relayflow.capacity.deployment import Indexes
from relayflow.core.records import FlowRecord

# Collections written at the flow rate (topology.json firestore keys), and the model of their
# documents: every datetime field of the model counts as monotonic, so a new one is caught.
FLOW_RATE_MODELS: Mapping[str, type[BaseModel]] = {
    "flows_collection": FlowRecord,
    "lanes_collection": FlowRecord,
}
# Fields holding ids callers choose (``order-000123``, ...) or Pub/Sub's rising message ids:
# written at the flow rate in the order callers number them, they are as monotonic as a time.
CALLER_ORDERED = frozenset({"flow_id", "message_id", "parent"})
# Rank correlation of write order against key order above which ids are "in key order".
KEY_ORDER_THRESHOLD = 0.5


@dataclass(frozen=True)
class Finding:
    """One hotspot: the collection, the field (or ids), the index, and why."""

    collection: str
    field: str
    index: str
    reason: str

    def __str__(self) -> str:
        return f"{self.collection}.{self.field} [{self.index}]: {self.reason}"


def _unwrapped(annotation: Any) -> list[Any]:
    """The types an annotation admits (``X | None`` -> [X])."""
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        return [a for a in typing.get_args(annotation) if a is not type(None)]
    return [annotation]


def _paths_of(annotation: Any, path: str, depth: int) -> Iterator[str]:
    for kind in _unwrapped(annotation):
        origin, args = typing.get_origin(kind), typing.get_args(kind)
        if kind is datetime:
            yield path
        elif isinstance(kind, type) and issubclass(kind, BaseModel) and depth < 6:
            yield from datetime_paths(kind, prefix=path + ".", depth=depth + 1)
        elif origin in (list, tuple, set, frozenset) and args:
            yield from _paths_of(args[0], path + "[]", depth + 1)
        elif origin is dict and len(args) == 2:
            yield from _paths_of(args[1], path + ".*", depth + 1)


def datetime_paths(model: type[BaseModel], prefix: str = "", depth: int = 0) -> Iterator[str]:
    """Every stored datetime of ``model``: dotted paths, ``*`` for any map key, ``[]`` for
    list elements; fields excluded from the document are left out."""
    for name, info in model.model_fields.items():
        if info.exclude:
            continue
        yield from _paths_of(info.annotation, prefix + name, depth)


def monotonic_fields(collections: Mapping[str, str]) -> dict[str, set[str]]:
    """Collection name -> the monotonic fields of its documents, for each collection written
    at the flow rate (``collections``: topology key -> name): its datetimes and the fields of
    ``CALLER_ORDERED`` it has."""
    found: dict[str, set[str]] = {}
    for key, model in FLOW_RATE_MODELS.items():
        name = collections.get(key, key.removesuffix("_collection"))
        ordered = CALLER_ORDERED & set(model.model_fields)
        found.setdefault(name, set()).update(datetime_paths(model), ordered)
    return found


def index_findings(indexes: Indexes, monotonic: Mapping[str, set[str]]) -> list[Finding]:
    """Each monotonic field that keeps a single-field index, or sits in a composite index
    that does not lead with ``shard``."""
    findings = []
    for collection, paths in sorted(monotonic.items()):
        for path in sorted(paths):
            if indexes.single_field_indexed(collection, path):
                findings.append(Finding(collection, path, "single-field", "indexed, not exempted"))
            for composite in indexes.composites_of(collection, path):
                if not composite.shard_first:
                    findings.append(
                        Finding(collection, path, composite.name, "composite without shard first")
                    )
    return findings


def key_order(ids: Sequence[str]) -> float:
    """Spearman's rank correlation of the order ids were written in against their key order:
    1 for ids written in key order (``order-000123``, ``-000124``), about 0 for spread ids."""
    n = len(ids)
    if n < 3:
        return 0.0
    by_key = sorted(range(n), key=lambda i: (ids[i], i))
    rank = [0] * n
    for position, i in enumerate(by_key):
        rank[i] = position
    squares = sum((i - rank[i]) ** 2 for i in range(n))
    return 1.0 - 6.0 * squares / (n * (n * n - 1))


def id_findings(collection: str, ids: Sequence[str]) -> list[Finding]:
    """A finding if ``ids`` (in the order they were written) follow their key order."""
    rho = key_order(ids)
    if abs(rho) < KEY_ORDER_THRESHOLD:
        return []
    reason = f"ids written in key order (rank correlation {rho:.2f})"
    return [Finding(collection, "document id", "key range", reason)]

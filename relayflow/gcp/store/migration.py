"""Bringing documents an earlier release wrote into the shards (``relayflow migrate-shards``).

Listings, the sweeper and admission ask each shard (``shard == s``), and a Firestore query
never matches a document that lacks the field: a flow written before the shards existed is
seen by them only after its next change gives it its ``shard``. One that is never changed
again (its task lost, so it waits on the sweeper) would wait for ever, and a rejected record
from before would drop out of the console's list. This one-off pass gives every such document
its shard, with a precondition on the version it read, so it never overwrites a change made
meanwhile (that change gave the document its shard anyway). A flow also gets the field that
finding it by id across tenants queries (``keys.FIND_FIELD``), for the same reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from google.api_core.exceptions import FailedPrecondition, NotFound

from relayflow.core.sharding import shard_of
from relayflow.gcp.store import keys
from relayflow.gcp.store.base import RPC_TIMEOUT_S, StoreBase


@dataclass
class MigrationReport:
    """Per collection: documents read, and those given their shard."""

    scanned: dict[str, int] = field(default_factory=dict)
    sharded: dict[str, int] = field(default_factory=dict)


class FirestoreMigration(StoreBase):
    """The one-off pass over flows, lanes and rejected records that lack a ``shard``."""

    def give_shards(
        self, progress: Callable[[str, int, int], None] | None = None
    ) -> MigrationReport:
        """Give every document without a ``shard`` the one its key belongs to; ``progress``
        hears (collection, scanned, sharded) every 500 documents and at each collection's end."""
        report = MigrationReport()
        for collection in (self._flows, self._lanes, self._rejected):
            scanned = sharded = 0
            wanted = self._wanted(collection)
            for snap in collection.select(["shard", *wanted]).stream(timeout=RPC_TIMEOUT_S):
                scanned += 1
                missing = self._missing(snap, wanted)
                if missing:
                    sharded += self._give(snap, missing)
                if progress and scanned % 500 == 0:
                    progress(collection.id, scanned, sharded)
            self._counters.add("firestore_reads", max(1, scanned))
            report.scanned[collection.id] = scanned
            report.sharded[collection.id] = sharded
            if progress:
                progress(collection.id, scanned, sharded)
        return report

    def _wanted(self, collection: object) -> tuple[str, ...]:
        """Besides ``shard``, what a document of ``collection`` is created with: a flow's
        ``FIND_FIELD`` (and its ``flow_id``, to derive it from)."""
        return (keys.FIND_FIELD, "flow_id") if collection is self._flows else ()

    def _missing(self, snap: object, wanted: tuple[str, ...]) -> dict[str, object]:
        """The fields ``snap`` lacks, with their values."""
        doc = snap.to_dict() or {}  # type: ignore[attr-defined]
        missing: dict[str, object] = {}
        if "shard" not in doc:
            key = keys.key_of(snap.reference.id)  # type: ignore[attr-defined]
            missing["shard"] = shard_of(key, self._shards)
        if keys.FIND_FIELD in wanted and keys.FIND_FIELD not in doc and doc.get("flow_id"):
            missing.update(keys.find_field(str(doc["flow_id"])))
        return missing

    def _give(self, snap: object, missing: dict[str, object]) -> int:
        ref = snap.reference  # type: ignore[attr-defined]
        option = self._client.write_option(last_update_time=snap.update_time)  # type: ignore[attr-defined]
        self._counters.add("firestore_writes")
        try:
            ref.update(missing, option=option, timeout=RPC_TIMEOUT_S)
        except (FailedPrecondition, NotFound):
            return 0  # changed (so sharded) or gone meanwhile
        return 1

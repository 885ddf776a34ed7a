"""Bringing documents an earlier release wrote into the shards (``relayflow migrate-shards``).

Listings, the sweeper and admission ask each shard (``shard == s``), and a Firestore query
never matches a document that lacks the field: a flow written before the shards existed is
seen by them only after its next change gives it its ``shard``. One that is never changed
again (its task lost, so it waits on the sweeper) would wait for ever, and a rejected record
from before would drop out of the console's list. This one-off pass gives every such document
its shard, with a precondition on the version it read, so it never overwrites a change made
meanwhile (that change gave the document its shard anyway).
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
            for snap in collection.select(["shard"]).stream(timeout=RPC_TIMEOUT_S):
                scanned += 1
                if "shard" not in (snap.to_dict() or {}):
                    sharded += self._give_shard(snap)
                if progress and scanned % 500 == 0:
                    progress(collection.id, scanned, sharded)
            self._counters.add("firestore_reads", max(1, scanned))
            report.scanned[collection.id] = scanned
            report.sharded[collection.id] = sharded
            if progress:
                progress(collection.id, scanned, sharded)
        return report

    def _give_shard(self, snap: object) -> int:
        ref = snap.reference  # type: ignore[attr-defined]
        shard = shard_of(keys.key_of(ref.id), self._shards)
        option = self._client.write_option(last_update_time=snap.update_time)  # type: ignore[attr-defined]
        self._counters.add("firestore_writes")
        try:
            ref.update({"shard": shard}, option=option, timeout=RPC_TIMEOUT_S)
        except (FailedPrecondition, NotFound):
            return 0  # changed (so sharded) or gone meanwhile
        return 1

"""Stable spreading of keys: which shard a flow's documents' indexes and tasks belong to, and
the prefix that spreads its document ids.

Firestore keeps documents and index entries in key order and splits the key space into tablets;
writes to lexicographically close keys (``order-000123``, ``order-000124``, …) or to index
entries with a monotonically increasing value land on one tablet, which takes about 500 writes
per second (https://cloud.google.com/firestore/docs/best-practices#high_read_write_and_delete_rates_to_a_narrow_document_range).
A Cloud Tasks queue dispatches at most 500 tasks per second
(https://cloud.google.com/tasks/docs/reference/rest/v2/projects.locations.queues#ratelimits).
relayflow spreads both by a hash of the flow's key, so whatever ids callers choose, load is
even. The hash is fixed for good: a document id or a shard chosen once is found again by every
later release.
"""

from __future__ import annotations

import hashlib

# Hex digits of the document-id prefix: 16**4 = 65,536 evenly used ranges, far more than the
# tablets a collection splits into, and short enough to leave ids readable.
PREFIX_DIGITS = 4


def _digest(key: str) -> bytes:
    return hashlib.blake2b(key.encode("utf-8"), digest_size=16).digest()


def spread(key: str) -> int:
    """A stable 64-bit number for ``key``, evenly spread whatever the keys look like."""
    return int.from_bytes(_digest(key)[8:16], "big")


def shard_of(key: str, shards: int) -> int:
    """The shard (0 .. shards-1) that ``key`` belongs to."""
    if shards < 1:
        raise ValueError(f"shards must be at least 1, not {shards}")
    return spread(key) % shards


def prefix_of(key: str) -> str:
    """The hex prefix that spreads ``key``'s document id over the key space (independent of
    its shard: other bits of the hash)."""
    return _digest(key)[:8].hex()[:PREFIX_DIGITS]

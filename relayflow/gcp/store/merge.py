"""Ordered queries asked of every index shard and merged in order, lazily.

A time that moves forward (``updated_at``, ``next_run_at``, ...) is indexed only behind a
``shard`` field (``relayflow.gcp.store.keys``), so an ordered query is asked of each shard and
the answers merged. Reading ``limit`` documents from each of S shards would cost S times a
page; instead each shard is first asked for a small batch (in parallel, a bounded pool), and a
shard is asked again only when the merge has taken all it gave and it may have more, each time
for twice what it gave before: a page costs about ``limit + S x BATCH`` reads.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from relayflow.telemetry import Counters

# Documents asked of each shard at first: a page of 50 over 128 shards reads about 50 + 384.
BATCH = 3
# Shards asked at once: enough to hide the round trips, few enough not to flood the client.
PARALLEL = 16


@dataclass
class _Shard:
    """One shard's query, what it gave that the merge has not taken, and where it ended."""

    query: Any
    buffer: deque[Any] = field(default_factory=deque)
    last: Any = None
    given: int = 0
    more: bool = True


def merged(
    queries: Sequence[Any],
    *,
    key: Callable[[Any], Any],
    limit: int,
    descending: bool,
    counters: Counters,
    timeout: float,
) -> list[Any]:
    """The first ``limit`` snapshots of ``queries`` (each ordered by ``key``, ascending or
    ``descending``, with no limit of its own) in one order."""
    if limit <= 0 or not queries:
        return []
    found = merging(
        queries, key=key, limit=limit, descending=descending, counters=counters, timeout=timeout
    )
    return list(itertools.islice(found, limit))


def merging(
    queries: Sequence[Any],
    *,
    key: Callable[[Any], Any],
    limit: int,
    descending: bool,
    counters: Counters,
    timeout: float,
) -> Iterator[Any]:
    """``merged``, lazily: each shard is asked again only when what it gave is taken, so a
    caller that stops early (a sifted list's page is full) reads no more. ``limit`` bounds
    each request, not what is taken."""
    if limit <= 0 or not queries:
        return iter(())
    shards = [_Shard(q) for q in queries]
    first = min(BATCH, limit)

    def fetch(shard: _Shard, n: int) -> None:
        query = shard.query if shard.last is None else shard.query.start_after(shard.last)
        snaps = list(query.limit(n).stream(timeout=timeout))
        counters.add("firestore_reads", max(1, len(snaps)))  # an empty answer bills one read
        shard.buffer.extend(snaps)
        shard.given += len(snaps)
        shard.more = len(snaps) == n
        if snaps:
            shard.last = snaps[-1]

    with ThreadPoolExecutor(max_workers=min(PARALLEL, len(shards))) as pool:
        list(pool.map(lambda s: fetch(s, first), shards))

    def drain(shard: _Shard) -> Iterator[Any]:
        while True:
            while shard.buffer:
                yield shard.buffer.popleft()
            if not shard.more:
                return
            fetch(shard, min(max(BATCH, shard.given), limit))

    return heapq.merge(*(drain(s) for s in shards), key=key, reverse=descending)

"""Keys spread evenly and stably, whatever ids callers choose."""

from __future__ import annotations

from collections import Counter

import pytest

from relayflow.core.sharding import PREFIX_DIGITS, prefix_of, shard_of, spread


def test_sequential_ids_spread_evenly_over_shards() -> None:
    shards = 8
    counts = Counter(shard_of(f"order-{n:06d}", shards) for n in range(8000))
    assert set(counts) == set(range(shards))
    assert max(counts.values()) / (8000 / shards) < 1.1


def test_sequential_ids_get_prefixes_far_apart() -> None:
    prefixes = [prefix_of(f"demo-e14c0c-{n:04d}") for n in range(1000)]
    assert all(len(p) == PREFIX_DIGITS for p in prefixes)
    # neighbours in id order are not neighbours in key order
    assert sorted(prefixes) != prefixes
    assert len({p[0] for p in prefixes}) == 16


def test_the_hash_is_fixed_across_releases() -> None:
    # a document id or a shard chosen once must be found again by every later release
    assert prefix_of("order-42") == "3f24"
    assert spread("order-42") == spread("order-42")
    assert shard_of("order-42", 1) == 0


def test_no_shards_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        shard_of("x", 0)

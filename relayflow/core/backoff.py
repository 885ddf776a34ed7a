"""Backoff: one pure, keyword-only function from attempt number to delay.

``delay(n) = min(initial * multiplier**n, max_interval)`` with jitter. The jitter is not random:
it is derived from a hash of a caller-given key (flow id, step, n), so a duplicate handler
computes the same schedule and tests can assert exact times.
"""

from __future__ import annotations

import hashlib
import math
from enum import StrEnum


class Jitter(StrEnum):
    """How a delay is spread around its nominal value."""

    NONE = "none"
    PROPORTIONAL = "proportional"  # uniform in [d*(1-j), d*(1+j)], capped at max_interval
    FULL = "full"  # uniform in [0, d] (AWS "full jitter")


def unit_interval(key: str) -> float:
    """A deterministic number in [0, 1) from a key (the first 8 bytes of its SHA-256)."""
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def nominal_delay(*, n: int, initial_s: float, multiplier: float, max_interval_s: float) -> float:
    """``min(initial * multiplier**n, max_interval)`` computed in log space, so no n overflows."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    finite = all(math.isfinite(v) for v in (initial_s, multiplier, max_interval_s))
    if not finite or initial_s <= 0 or multiplier < 1 or max_interval_s < initial_s:
        raise ValueError(
            "need finite initial_s > 0, multiplier >= 1 and max_interval_s >= initial_s, got "
            f"{initial_s=}, {multiplier=}, {max_interval_s=}"
        )
    if multiplier == 1:
        return initial_s
    # Compare exponents instead of computing multiplier**n, which overflows for large n.
    if math.log(initial_s) + n * math.log(multiplier) >= math.log(max_interval_s):
        return max_interval_s
    return min(initial_s * multiplier**n, max_interval_s)


def compute_delay(
    *,
    n: int,
    initial_s: float,
    multiplier: float,
    max_interval_s: float,
    jitter: float = 0.2,
    mode: Jitter = Jitter.PROPORTIONAL,
    key: str = "",
) -> float:
    """The delay before try ``n`` (0-based), jittered deterministically by ``key``."""
    if not 0 <= jitter < 1:
        raise ValueError(f"jitter must be in [0, 1), got {jitter}")
    base = nominal_delay(
        n=n, initial_s=initial_s, multiplier=multiplier, max_interval_s=max_interval_s
    )
    if mode is Jitter.NONE or (mode is Jitter.PROPORTIONAL and jitter == 0):
        return base
    u = unit_interval(f"{key}:{n}")
    if mode is Jitter.FULL:
        return base * u
    return min(base * (1 - jitter + 2 * jitter * u), max_interval_s)


def clip_to_deadline(delay_s: float, *, remaining_s: float) -> float | None:
    """The delay cut short to land on the deadline; None when the deadline has passed."""
    if remaining_s <= 0:
        return None
    return min(delay_s, remaining_s)

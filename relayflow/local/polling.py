"""Wait for something observable, with a deadline: the one place the local stack waits."""

from __future__ import annotations

import time
from collections.abc import Callable


def poll_until(
    predicate: Callable[[], bool],
    *,
    timeout_s: float,
    interval_s: float = 0.1,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """True as soon as ``predicate()`` is; False once ``timeout_s`` has passed without it."""
    deadline = clock() + timeout_s
    while True:
        if predicate():
            return True
        remaining = deadline - clock()
        if remaining <= 0:
            return False
        sleep(min(interval_s, remaining))

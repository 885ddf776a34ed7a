"""Fault injection: armed rules that make the next N matching requests fail or answer slowly."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from emulators.client_api.models import FaultRule

Random = Callable[[], float]


@dataclass
class _Armed:
    rule: FaultRule
    remaining: int


class FaultInjector:
    """Thread-safe list of armed fault rules; the first matching rule with budget left fires."""

    def __init__(self, *, rand: Random = random.random) -> None:
        self._rand = rand
        self._lock = threading.Lock()
        self._armed: list[_Armed] = []

    def add(self, rules: Sequence[FaultRule]) -> None:
        with self._lock:
            self._armed.extend(_Armed(rule, rule.count) for rule in rules)

    def clear(self) -> None:
        with self._lock:
            self._armed.clear()

    def take(self, method: str, path: str) -> FaultRule | None:
        """The rule that applies to this request, its budget spent; None when none fires."""
        with self._lock:
            for armed in self._armed:
                if armed.rule.matches(method, path) and self._fires(armed.rule):
                    armed.remaining -= 1
                    self._armed = [a for a in self._armed if a.remaining > 0]
                    return armed.rule
        return None

    def describe(self) -> list[dict[str, Any]]:
        with self._lock:
            return [{**a.rule.model_dump(), "remaining": a.remaining} for a in self._armed]

    def _fires(self, rule: FaultRule) -> bool:
        # A probabilistic rule that does not fire keeps its budget for a later request.
        return rule.probability >= 1.0 or self._rand() < rule.probability

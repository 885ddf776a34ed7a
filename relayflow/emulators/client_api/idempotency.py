"""Idempotency keys: which resource a (scope, key) created, and with which body.

Not locked on its own: the state that owns it holds its lock around check-then-create, so two
retries of one request that arrive at once still make one effect.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from relayflow.emulators.client_api.errors import ApiError


@dataclass(frozen=True)
class Outcome:
    """A create's answer: the resource, and whether it was replayed under a known key."""

    body: dict[str, Any]
    replayed: bool


@dataclass(frozen=True)
class _KeyRecord:
    fingerprint: str
    resource_id: str


class IdempotencyKeys:
    """Keys per scope (e.g. "registrations"): the same key in two scopes is two keys."""

    def __init__(self) -> None:
        self._records: dict[tuple[str, str], _KeyRecord] = {}

    def known_id(self, scope: str, key: str, body: Mapping[str, Any]) -> str | None:
        """The id created earlier under this key, or None; 409 if the key came with another body."""
        record = self._records.get((scope, key))
        if record is None:
            return None
        if record.fingerprint != fingerprint(body):
            raise ApiError(
                409, "IDEMPOTENCY_KEY_REUSED", "this Idempotency-Key was used with another body"
            )
        return record.resource_id

    def remember(self, scope: str, key: str, body: Mapping[str, Any], resource_id: str) -> None:
        self._records[scope, key] = _KeyRecord(fingerprint(body), resource_id)

    def clear(self) -> None:
        self._records.clear()


def fingerprint(body: Mapping[str, Any]) -> str:
    """The body as canonical JSON: two bodies are "the same" when these are equal."""
    return json.dumps(body, sort_keys=True, separators=(",", ":"))

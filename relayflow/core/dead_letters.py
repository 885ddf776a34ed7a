"""Dead letters as operators see them: a start message (or a signal) that failed every delivery
and is held for an operator to look at and replay, and the hold that keeps them.

The hold is a port: ``relayflow.gcp.dead_letters.DeadLetterHold`` is the Pub/Sub adapter (a pull
subscription on the dead-letter topic), the api and the console work with this protocol, and
tests with an in-memory fake.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

# The attribute Pub/Sub adds when it dead-letters a message: how often it was delivered.
DELIVERY_COUNT = "CloudPubSubDeadLetterSourceDeliveryCount"


@dataclass(frozen=True)
class DeadLetter:
    """A held start message, or a held signal (``signal``)."""

    message_id: str
    data: bytes
    attributes: dict[str, str]
    published_at: datetime | None
    # The topic a replay publishes it on ('' if the hold has not said), and whether that is
    # the signals topic: an edited replay is checked as what it is, a start message or not.
    goes_to: str = ""
    signal: bool = False

    @property
    def delivery_count(self) -> int | None:
        """How often the start function was tried on it before it was dead-lettered."""
        count = self.attributes.get(DELIVERY_COUNT, "")
        return int(count) if count.isdigit() else None

    def text(self, limit: int = 16384) -> str:
        """The data as text, undecodable bytes replaced, at most ``limit`` bytes of it."""
        return self.data[:limit].decode("utf-8", errors="replace")


class DeadLetters(Protocol):
    """The dead-letter hold: what is held, and a replay of one back where it came from."""

    def held(self, *, limit: int = 100) -> list[DeadLetter]: ...

    def replay(
        self,
        message_id: str,
        *,
        by: str,
        reason: str,
        data: bytes | None = None,
        vet: Vet | None = None,
    ) -> str:
        """Publish the held ``message_id`` back where it came from (its own data, or
        ``data``, which ``vet`` checks first against the letter it replaces); the new
        message's id. DeadLetterNotFound if it is not held."""
        ...


# Checks an edited replay's data against the letter it replaces; raises to refuse it.
Vet = Callable[[DeadLetter, bytes], None]

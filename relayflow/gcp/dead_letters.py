"""Dead-lettered messages: browse them, and replay one back where it came from.

A start message (or a signal) that failed every delivery is moved by Pub/Sub to
``flow-requests-dead`` and kept by the pull subscription ``flow-requests-dead-hold``; a replay
publishes it on the topic of the subscription that gave it up (``flow-requests``, a tenant's
own start topic, ``flow-signals``). Browsing pulls what is held and
releases it at once (ack deadline 0), so it stays for the next reader; a replay publishes the
message (as it was, or as an operator fixed it) and only then acks it, so a replay that fails
to publish loses nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime

from google.api_core.exceptions import DeadlineExceeded
from google.cloud.pubsub_v1 import SubscriberClient
from google.pubsub_v1 import ReceivedMessage

from relayflow.core.dead_letters import DeadLetter, Vet
from relayflow.core.errors import DeadLetterNotFound
from relayflow.gcp.events import Events

log = logging.getLogger("relayflow.gcp.dead_letters")
# Attributes Pub/Sub adds when it dead-letters a message; a replay leaves them behind.
DEAD_LETTER_PREFIX = "CloudPubSubDeadLetter"
# Which subscription gave the message up (``projects/P/subscriptions/NAME``, or the name).
SOURCE_SUBSCRIPTION = "CloudPubSubDeadLetterSourceSubscription"
# Attributes a replay adds: the audit trail travels with the message (and into ``rejected``
# if the start function refuses it again).
REPLAYED_BY = "relayflow_replayed_by"
REPLAY_REASON = "relayflow_replay_reason"
REPLAY_OF = "relayflow_replay_of"
MAX_ATTRIBUTE_BYTES = 1024  # Pub/Sub's limit on an attribute value
# A pull returns at most this many messages
# (https://cloud.google.com/pubsub/docs/reference/rest/v1/projects.subscriptions/pull,
# ``maxMessages``: the server may return fewer). A replay pulls as many times as it takes.
PULL_BATCH = 1000
# A replay scanning a large hold logs its progress every this many messages.
SCAN_PROGRESS_EVERY = 10_000
# Browsing wants what is held now: a pull that finds nothing waits this long, then ends.
# (return_immediately would not wait, but Google deprecated it.)
PULL_TIMEOUT_S = 1.0


class DeadLetterHold:
    """The dead-letter hold subscription, and the requests topic replays go to
    (``relayflow.core.dead_letters.DeadLetters`` over Pub/Sub)."""

    def __init__(
        self,
        subscriber: SubscriberClient,
        *,
        project: str,
        subscription: str,
        events: Events,
        requests_topic: str,
        origins: Callable[[str], str | None] | None = None,
        signals_topic: str | None = None,
    ) -> None:
        self._subscriber = subscriber
        self._path = subscriber.subscription_path(project, subscription)
        self._events = events
        self._requests = requests_topic
        # The topic a dead letter goes back to, by the subscription that gave it up: a
        # tenant's start message to that tenant's topic, a signal to the signals topic.
        self._origins = origins or (lambda subscription: None)
        self._signals = signals_topic

    def held(self, *, limit: int = 100) -> list[DeadLetter]:
        """Up to ``limit`` held messages (released again at once, for the next reader)."""
        received = self._pull(limit)
        self._release(received)
        return [self._letter(m) for m in received]

    def replay(
        self,
        message_id: str,
        *,
        by: str,
        reason: str,
        data: bytes | None = None,
        vet: Vet | None = None,
    ) -> str:
        """Publish the held message ``message_id`` back where it came from (the topic of the
        subscription that gave it up; the requests topic if that is not known) — its own
        data, or ``data`` — then ack it; the new message's id. DeadLetterNotFound if it is not
        held."""
        found, received = self._find(message_id)
        acked: ReceivedMessage | None = None
        try:
            if found is None:
                raise DeadLetterNotFound(
                    f"no dead letter {message_id!r} is held: it was replayed already, or "
                    "another reader holds it for up to a minute"
                )
            letter = self._letter(found)
            if data is not None and vet is not None:
                vet(letter, data)  # refused before anything is published; released below
            attributes = _replay_attributes(letter, by=by, reason=reason)
            published = self._events.publish_raw(
                letter.goes_to, letter.data if data is None else data, **attributes
            )
            self._subscriber.acknowledge(subscription=self._path, ack_ids=[found.ack_id])
            acked = found
        finally:  # a refused edit or a failed publish leaves the letter held, for a retry
            self._release([m for m in received if m is not acked])
        log.info(
            "dead letter replayed",
            extra={"message_id": message_id, "published": published, "by": by, "reason": reason},
        )
        return published

    def origin(self, attributes: dict[str, str]) -> str:
        """The topic a letter with ``attributes`` came by, as far as its dead-letter
        attributes say (the requests topic if they do not)."""
        source = attributes.get(SOURCE_SUBSCRIPTION, "").rpartition("/")[2]
        return (source and self._origins(source)) or self._requests

    def _letter(self, received: ReceivedMessage) -> DeadLetter:
        message = received.message
        published = message.publish_time
        attributes = dict(message.attributes)
        topic = self.origin(attributes)
        return DeadLetter(
            message_id=message.message_id,
            data=bytes(message.data),
            attributes=attributes,
            published_at=published if isinstance(published, datetime) else None,
            goes_to=topic,
            signal=topic == self._signals,
        )

    def _find(self, message_id: str) -> tuple[ReceivedMessage | None, list[ReceivedMessage]]:
        """The held message ``message_id`` (or None) and every message pulled looking for it,
        which the caller releases. No fixed cap: it pulls until it finds the message or the
        hold has nothing it has not seen. What it pulled stays leased until released (the
        hold's ack deadline, 60 s), so a later pull cannot hand the same messages back; one
        that does (a lease ran out on a very long scan) is a repeat, and a batch of nothing
        but repeats means the whole hold has been seen."""
        received: list[ReceivedMessage] = []
        seen: set[str] = set()
        while True:
            batch = [m for m in self._pull_once(PULL_BATCH) if m.message.message_id not in seen]
            if not batch:
                return None, received
            received.extend(batch)
            seen.update(m.message.message_id for m in batch)
            found = next((m for m in batch if m.message.message_id == message_id), None)
            if found is not None:
                return found, received
            if len(received) // SCAN_PROGRESS_EVERY > (len(received) - len(batch)) // (
                SCAN_PROGRESS_EVERY
            ):
                log.info("looking for a dead letter", extra={"scanned": len(received)})

    def _pull(self, limit: int) -> list[ReceivedMessage]:
        received: list[ReceivedMessage] = []
        while len(received) < limit:
            batch = self._pull_once(min(limit - len(received), PULL_BATCH))
            if not batch:
                break
            received.extend(batch)
        return received

    def _pull_once(self, count: int) -> list[ReceivedMessage]:
        """One pull of at most ``count`` held messages; [] when nothing (more) is held."""
        try:
            response = self._subscriber.pull(
                subscription=self._path, max_messages=count, timeout=PULL_TIMEOUT_S
            )
        except DeadlineExceeded:  # nothing (more) is held: a pull waits for what may come
            return []
        return list(response.received_messages)

    def _release(self, received: Sequence[ReceivedMessage]) -> None:
        if received:
            self._subscriber.modify_ack_deadline(
                subscription=self._path,
                ack_ids=[m.ack_id for m in received],
                ack_deadline_seconds=0,
            )


def _replay_attributes(letter: DeadLetter, *, by: str, reason: str) -> dict[str, str]:
    kept = {k: v for k, v in letter.attributes.items() if not k.startswith(DEAD_LETTER_PREFIX)}
    audit = {REPLAYED_BY: by, REPLAY_REASON: reason, REPLAY_OF: letter.message_id}
    return kept | {k: _bounded(v) for k, v in audit.items()}


def _bounded(value: str) -> str:
    return value.encode("utf-8")[:MAX_ATTRIBUTE_BYTES].decode("utf-8", errors="ignore")

"""One subscription on ``flow-results`` per process, feeding the waiter table.

The client creates the subscription for itself (``relayflow-client-{uuid}``) when a handle
first waits (or ``Client.listen()`` asks), streams it, and deletes it on ``close()`` or at
exit. It is made to go away if the process dies without deleting it: it expires after a day
without a subscriber, the least Pub/Sub allows, and keeps unacked events for 10 minutes, the
least too (https://cloud.google.com/pubsub/docs/subscription-properties). In the cloud the
caller's identity needs ``pubsub.subscriptions.create``/``delete`` on the project and
``pubsub.topics.attachSubscription`` on ``flow-results`` (``roles/pubsub.subscriber`` and
``roles/pubsub.editor`` cover them).

Every event is acked at once: it is only a wake-up, a flow's document stays the truth. The
attributes name the flow (``tenant``, ``flow_id``), so an event no one here waits for is
dropped without parsing its body. Events that went out before the subscription existed are
not delivered to it; what recovers them is a read of each waited-for flow, done by the client
when a waiter registers (unless the subscription predates the handle's start message) and for
every waiter when the subscription is (re)created: ``epoch`` counts creations for that.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any

from google.api_core.exceptions import GoogleAPICallError, NotFound, RetryError
from google.cloud.pubsub_v1 import SubscriberClient
from google.cloud.pubsub_v1.subscriber.message import Message
from google.cloud.pubsub_v1.types import FlowControl
from google.protobuf import duration_pb2

from relayflow.client.waiters import FlowResult, Waiters, WaitKey

log = logging.getLogger("relayflow.client.results")
EXPIRE_AFTER_S = 24 * 3600  # Pub/Sub's least expiration TTL
RETAIN_S = 600  # Pub/Sub's least message retention
ACK_DEADLINE_S = 60
# Events held by the streaming pull at once: resolving one is a dict look-up, so a large
# window costs memory only (an event is ~0.5 KiB).
MAX_OUTSTANDING = 1000

Recover = Callable[[list[WaitKey]], None]


class ResultSubscription:
    """The subscription, its stream and its waiter table. ``recover(keys)`` is called (on a
    thread of its own) with every waited-for flow each time the subscription is re-created
    after the first time: the client reads those flows once."""

    def __init__(
        self,
        subscriber: SubscriberClient,
        *,
        project: str,
        topic: str,
        filter_: str = "",
        recover: Recover | None = None,
        subscription_project: str | None = None,
    ) -> None:
        self.waiters = Waiters()
        self._subscriber = subscriber
        self._project = project
        self._own_project = subscription_project or project
        self._topic = topic
        self._filter = filter_
        self._recover = recover
        self._lock = threading.Lock()
        self._stream: Any = None
        self._path: str | None = None
        self._closed = False
        self.epoch = 0  # subscriptions created so far; 0: none yet
        self.delivered = 0  # events that resolved a waiter

    @property
    def path(self) -> str | None:
        return self._path

    def ensure(self) -> int:
        """Create and stream the subscription if it does not run; the epoch it runs in."""
        with self._lock:
            if self._closed:
                raise RuntimeError("this client is closed")
            if self._stream is None:
                self._create()
            return self.epoch

    def close(self) -> None:
        """Stop streaming and delete the subscription (waiters left wait in vain: their own
        timeouts end them)."""
        with self._lock:
            self._closed = True
            stream, path = self._stream, self._path
            self._stream = None
        atexit.unregister(self.close)
        if stream is not None:
            stream.cancel()
            with contextlib.suppress(Exception):
                stream.result(timeout=10)
        if path is not None:
            # One try, briefly: a subscription left behind expires on its own after a day.
            with contextlib.suppress(NotFound, GoogleAPICallError, RetryError):
                self._subscriber.delete_subscription(subscription=path, timeout=10, retry=None)

    def _create(self) -> None:
        path = self._subscriber.subscription_path(
            self._own_project, f"relayflow-client-{uuid.uuid4().hex[:16]}"
        )
        request: dict[str, Any] = {
            "name": path,
            "topic": self._subscriber.topic_path(self._project, self._topic),
            "ack_deadline_seconds": ACK_DEADLINE_S,
            "message_retention_duration": duration_pb2.Duration(seconds=RETAIN_S),
            "expiration_policy": {"ttl": duration_pb2.Duration(seconds=EXPIRE_AFTER_S)},
        }
        if self._filter:
            request["filter"] = self._filter
        self._subscriber.create_subscription(request=request, timeout=30)
        self._path = path
        self.epoch += 1
        self._stream = self._subscriber.subscribe(
            path,
            callback=self.on_message,
            flow_control=FlowControl(max_messages=MAX_OUTSTANDING),
        )
        self._stream.add_done_callback(self._ended)
        atexit.register(self.close)
        if self.epoch > 1 and self._recover is not None:
            keys = self.waiters.keys()
            threading.Thread(target=self._recover, args=(keys,), daemon=True).start()

    def _ended(self, stream: Any) -> None:
        """The stream stopped: by ``close()``, or because the subscription is gone (expired,
        deleted by someone): then make a new one, and recover what the gap may have hidden."""
        with self._lock:
            if self._closed or stream is not self._stream:
                return
            self._stream = None
            try:
                stream.result(timeout=0)
            except Exception as exc:  # the stream's reason to stop: logged, then re-created
                log.warning("results subscription stopped; re-creating it", extra={"error": exc})
            if self.waiters.keys():
                try:
                    self._create()
                except GoogleAPICallError as exc:
                    log.error("could not re-create the results subscription: %s", exc)

    def on_message(self, message: Message) -> None:
        """One event: ack it, and if anyone waits for its flow, resolve them."""
        message.ack()
        self.deliver(message.attributes, message.data)

    def deliver(self, attributes: Any, data: bytes) -> bool:
        """Resolve the waiters of the event (``attributes``, body ``data``); True if any."""
        key = (str(attributes.get("tenant") or "default"), str(attributes.get("flow_id") or ""))
        if not self.waiters.wants(key):
            return False
        try:
            result = FlowResult.from_event(json.loads(data))
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("unreadable result event for %s: %s", key, exc)
            return False
        resolved = self.waiters.deliver(result)
        if resolved:
            self.delivered += 1
        return resolved

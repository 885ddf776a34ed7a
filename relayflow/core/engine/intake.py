"""Intake: a start message becomes a flow, once, however often the message arrives.

A malformed message is recorded in ``rejected`` and reported, never raised: raising would make
Pub/Sub redeliver something that can never succeed. Infrastructure errors do raise, so that
Pub/Sub redelivers. Publishers are bound to tenants by IAM on their topics, so the topic, not
the message, says whose flow it is.

A flow's sensitive input fields are sealed before its input is stored or offloaded (the
engine's codec, ``Kernel.codec``); a refused message is recorded with them redacted
(``core.redaction``), and they are kept out of what the start logs (``core.scrubbing``).
"""

from __future__ import annotations

import base64
import logging
from datetime import timedelta
from typing import Any

from opentelemetry.trace import SpanKind

from relayflow.core import planner, sensitive, tracing
from relayflow.core.codec import Slot
from relayflow.core.engine.kernel import Kernel
from relayflow.core.engine.keys import safe_id
from relayflow.core.engine.outcomes import Started, StartResult
from relayflow.core.errors import InvalidMessage, Unreadable, UnreadableSealedValue
from relayflow.core.messages import bounded, parse_start
from relayflow.core.payloads import fingerprint
from relayflow.core.records import FlowRecord
from relayflow.core.redaction import kept_message
from relayflow.core.rejections import MAX_SHOWN_NAME, rejected_task
from relayflow.core.tenants import DEFAULT_TENANT

log = logging.getLogger("relayflow.core.engine")
# What of a rejected message's data is kept for whoever looks into it.
KEPT_DATA_BYTES = 16384


class Intake:
    """Starts flows from start messages; records the messages it cannot start."""

    def __init__(self, kernel: Kernel) -> None:
        self._k = kernel

    def start(
        self, data: bytes, *, message_id: str, attributes: dict[str, str], tenant: str
    ) -> StartResult:
        """Start the flow a message asks for, in a span that continues the publisher's trace
        (``googclient_traceparent``) and is the root of everything the flow does later."""
        with tracing.span(
            self._k.tracer,
            "start flow",
            traceparent=attributes.get(tracing.PUBSUB_TRACEPARENT),
            kind=SpanKind.CONSUMER,
            attributes={"message_id": message_id},
        ) as span:
            result = self._start(data, message_id=message_id, attributes=attributes, bound=tenant)
            span.set_attribute("outcome", result.outcome.value)
            if result.flow_id:
                span.set_attribute("flow_id", result.flow_id)
            return result

    def reject_task(self, task_name: str, reason: str, body: bytes) -> None:
        """Record a task body that can never be run (it does not parse, or names an id
        Firestore reserves) in ``rejected``, kept as long as ended flows are."""
        log.error(
            "task payload rejected", extra={"task": task_name[:MAX_SHOWN_NAME], "reason": reason}
        )
        retention_days = self._k.limits.retention_s / 86400.0
        now = self._k.clock.now()
        doc_id, record = rejected_task(
            task_name, reason, body, now=now, retention_days=retention_days
        )
        self._k.store.reject(doc_id, record)

    def _start(
        self, data: bytes, *, message_id: str, attributes: dict[str, str], bound: str
    ) -> StartResult:
        k = self._k
        try:
            message, flow = parse_start(
                data, k.registry, attributes, max_input_bytes=k.sizes.input_bytes
            )
            tenant = tenant_of(message.tenant, bound)
        except InvalidMessage as exc:
            self._reject(data, message_id, attributes, exc.reason)
            k.metrics.message_rejected("", "INVALID_MESSAGE")
            return StartResult(Started.REJECTED, reason=exc.reason)
        k.sealing.reveal(flow, message.input)
        flow_id = message.flow_id or safe_id(message_id)
        policy = k.admission.tenants.policy(tenant)
        record = planner.new_record(
            k.plan(flow),
            flow_id=flow_id,
            input=message.input,
            message_id=message_id,
            deadline_s=message.deadline_s,
            tenant=tenant,
            priority=capped(message.priority, policy.priority),
            waiting=k.admission.must_wait(tenant),
            first_lease_s=k.limits.claim_lease_s + k.limits.first_delivery_within_s,
            labels=message.labels,
        ).model_copy(update={"trace": tracing.current_traceparent()})
        # Its sensitive fields sealed, then offloaded if large (the bucket down: this raises,
        # and Pub/Sub redelivers the start).
        stored = k.codec.encode(message.input, Slot.of(record, "input"))
        record = record.model_copy(update={"input": stored})
        if not k.store.create(record):
            return self._duplicate(record, message.input, data, message_id, attributes)
        k.metrics.flow_started(flow.name, k.admission.tenants.label(tenant))
        k.settle(record)
        if record.admission == "waiting" and not k.admission.seems_full(tenant):
            k.admit(tenant)  # in order with the others waiting
        log.info("flow started", extra={"flow_id": flow_id, "flow": flow.name, "tenant": tenant})
        return StartResult(Started.STARTED, flow_id=flow_id)

    def _duplicate(
        self,
        record: FlowRecord,
        given: dict[str, Any],
        data: bytes,
        message_id: str,
        attributes: dict[str, str],
    ) -> StartResult:
        """A start for a flow id that exists: the same request again, or a conflicting one."""
        existing = self._k.store.get(record.key)
        if existing is None:  # created and deleted meanwhile; Pub/Sub will redeliver
            raise RuntimeError(f"flow {record.flow_id} exists and does not")
        same = (existing.flow, existing.labels) == (record.flow, record.labels)
        if not same or not self._same_input(existing, record, given):
            reason = (
                f"flow_id {record.flow_id!r} already names a {existing.flow!r} flow with a "
                "different input or labels; choose a new flow_id"
            )
            self._reject(data, message_id, attributes, reason)
            self._k.metrics.message_rejected(existing.flow, "FLOW_ID_CONFLICT")
            return StartResult(Started.REJECTED, flow_id=record.flow_id, reason=reason)
        self._k.settle(existing)  # the first start may have died before enqueueing
        if existing.admission == "waiting":
            self._k.admit(existing.tenant)
        log.info("duplicate start", extra={"flow_id": record.flow_id, "message_id": message_id})
        return StartResult(Started.DUPLICATE, flow_id=record.flow_id)

    def _same_input(self, existing: FlowRecord, record: FlowRecord, given: dict[str, Any]) -> bool:
        """Whether a flow that exists was started with ``given`` (``record``'s input as
        stored): the same stored form (offloaded values compared by hash), or, for a flow
        that marks its input, the same once opened (its keyset's primary key may have changed
        since, sealing the same value otherwise)."""
        if fingerprint(existing.input) == fingerprint(record.input):
            return True
        flow = self._k.sealing.flow_of(existing.flow, existing.version)
        if flow is None or not sensitive.under(flow.sensitive_paths, ("input",)):
            return False
        try:
            return bool(self._k.loaded(existing.input, existing, "input") == given)
        except (*Unreadable, UnreadableSealedValue):  # gone, or under a key no longer held
            return False

    def reject_message(
        self, data: bytes, message_id: str, attributes: dict[str, str], reason: str
    ) -> None:
        """Record a message that will never be taken (a signal refused or ignored) in
        ``rejected`` with ``reason``, as a start message that is refused is."""
        self._reject(data, message_id, attributes, reason)

    def _reject(
        self, data: bytes, message_id: str, attributes: dict[str, str], reason: str
    ) -> None:
        reason = bounded(reason)
        log.warning("start message rejected", extra={"message_id": message_id, "reason": reason})
        now = self._k.clock.now()
        kept, redacted = kept_message(data, self._k.registry)
        self._k.store.reject(
            safe_id(message_id),
            {
                "message_id": message_id,
                "reason": reason,
                "data_base64": base64.b64encode(kept[:KEPT_DATA_BYTES]).decode("ascii"),
                "data_truncated": len(kept) > KEPT_DATA_BYTES,
                # What was left out of it, and how large it was (``core.redaction``).
                **({"redacted": redacted, "data_bytes": len(data)} if redacted else {}),
                # As pairs, not a map: Firestore refuses some keys Pub/Sub allows (``__x__``).
                "attributes": [{"key": k, "value": v} for k, v in sorted(attributes.items())],
                "rejected_at": now,
                "expire_at": now + timedelta(seconds=self._k.limits.retention_s),
            },
        )


def tenant_of(named: str | None, bound: str) -> str:
    """The tenant of a start message that came by ``bound``'s topic; InvalidMessage if the
    message names another (a publisher may start flows of its own tenant only)."""
    if named is None or named == bound:
        return bound
    came_by = (
        "flow-requests, which starts the default tenant's flows only"
        if bound == DEFAULT_TENANT
        else f"tenant {bound!r}'s own topic"
    )
    raise InvalidMessage(
        f"the message names tenant {named!r} but came by {came_by}: a tenant's flows start on "
        f"its own topic (flow-requests.{named}), which only its publishers may publish on"
    )


def capped(asked: str | None, allowed: str) -> str:
    """A message's priority, never above its tenant's: it may ask for ``low``, not ``high``."""
    return "low" if asked == "low" or allowed == "low" else allowed

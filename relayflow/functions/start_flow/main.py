"""The Pub/Sub-triggered start function: decode the CloudEvent, hand it to the engine.

Deployed on Cloud Run behind the push subscription flow-requests-start (OIDC, dead-letter
policy); locally the Pub/Sub emulator pushes to functions-framework. Either way
functions-framework turns the push body into a messagePublished CloudEvent, and an Eventarc
trigger would deliver the same event.
"""

from __future__ import annotations

import logging

import functions_framework
from cloudevents.http.event import CloudEvent

from relayflow.core.errors import InvalidMessage
from relayflow.core.messages import unwrap_pubsub
from relayflow.runtime import boot
from relayflow.topology import tenant_of_topic, topic_of_source

runtime = boot("relayflow-start")
log = logging.getLogger("relayflow.start")


@functions_framework.cloud_event
def start_flow(event: CloudEvent) -> None:
    """Start one flow per message. Returning acks; raising makes Pub/Sub redeliver."""
    try:
        message = unwrap_pubsub(event.get_data())
    except InvalidMessage as exc:
        # Nothing to record under: no message id. Ack, or it would come back forever.
        log.error("unreadable start event", extra={"reason": exc.reason, "event_id": event["id"]})
        return
    # Publishers are bound to tenants by IAM on their topics: the topic says whose flow it is.
    tenant = tenant_of_topic(runtime.topology, topic_of_source(event.get("source")))
    result = runtime.engine.start(
        message.data, message_id=message.message_id, attributes=message.attributes, tenant=tenant
    )
    log.info(
        "start message handled",
        extra={"outcome": result.outcome.value, "flow_id": result.flow_id, "reason": result.reason},
    )

"""Clients of the local emulators: Google API clients over insecure gRPC, the Firestore wipe.

Built from explicit hosts rather than ``*_EMULATOR_HOST`` variables, so nothing here depends on
(or changes) the current process's environment.
"""

from __future__ import annotations

import grpc
import requests
from google.cloud.tasks_v2 import CloudTasksClient
from google.cloud.tasks_v2.services.cloud_tasks.transports import CloudTasksGrpcTransport
from google.pubsub_v1 import PublisherClient, SubscriberClient
from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport
from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcTransport


def tasks_client(host: str) -> CloudTasksClient:
    """A Cloud Tasks client for the emulator at ``host`` (HOST:PORT of its gRPC port)."""
    return CloudTasksClient(transport=CloudTasksGrpcTransport(channel=grpc.insecure_channel(host)))


def publisher_client(host: str) -> PublisherClient:
    """The Pub/Sub admin/publish API (GAPIC) of the emulator at ``host``."""
    return PublisherClient(transport=PublisherGrpcTransport(channel=grpc.insecure_channel(host)))


def subscriber_client(host: str) -> SubscriberClient:
    """The Pub/Sub subscription API (GAPIC) of the emulator at ``host``."""
    channel = grpc.insecure_channel(host)
    return SubscriberClient(transport=SubscriberGrpcTransport(channel=channel))


def wipe_firestore(host: str, project: str, *, timeout_s: float = 10.0) -> None:
    """Delete all documents of ``project`` in the Firestore emulator at ``host`` (HOST:PORT)."""
    url = f"http://{host}/emulator/v1/projects/{project}/databases/(default)/documents"
    with requests.Session() as session:
        session.trust_env = False
        session.delete(url, timeout=timeout_s).raise_for_status()

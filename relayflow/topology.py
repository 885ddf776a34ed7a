"""The messaging topology (topics, subscriptions, queues), defined once in topology.json.

Terraform reads the same file with jsondecode(file(...)), so local runs and the cloud share
names, retry and rate settings. Each queue kind has ``shards`` queues (``shard_name``: shard 0
keeps the kind's name); the environment's count (``RELAYFLOW_QUEUE_SHARDS``, Terraform's
``queue_shards``) replaces the file's with ``with_queue_shards``.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from importlib import resources

from pydantic import BaseModel, ConfigDict, Field, model_validator

from relayflow.core.queue_shards import MAX_QUEUE_SHARDS, shard_name
from relayflow.core.tenants import DEFAULT_TENANT, TENANT_PATTERN

# A Cloud Tasks queue id: letters, digits and hyphens, at most 100 characters
# (https://cloud.google.com/tasks/docs/reference/rest/v2/projects.locations.queues#Queue).
QUEUE_ID_PATTERN = r"[A-Za-z0-9-]{1,100}"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Topics(_Frozen):
    requests: str
    results: str
    dead_letter: str
    # Completions of callback tokens, pushed to the api's /signals.
    signals: str = "flow-signals"


class Subscription(_Frozen):
    name: str
    topic: str
    ack_deadline_s: int = Field(ge=10, le=600)
    max_delivery_attempts: int | None = Field(default=None, ge=5, le=100)
    dead_letter_topic: str | None = None
    min_backoff_s: int | None = Field(default=None, ge=0, le=600)
    max_backoff_s: int | None = Field(default=None, ge=0, le=600)


class TenantRequests(_Frozen):
    """The names of a tenant's own start topic and its push subscription (``{tenant}`` in
    each): publishers are bound to tenants by IAM on their topic, and the start function
    takes a message's tenant from the topic it came by."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    topic: str = "flow-requests.{tenant}"
    subscription: str = "flow-requests.{tenant}.start"

    def topic_of(self, tenant: str) -> str:
        return self.topic.format(tenant=tenant)

    def subscription_of(self, tenant: str) -> str:
        return self.subscription.format(tenant=tenant)

    def tenant_of(self, topic: str) -> str | None:
        """The tenant whose own topic ``topic`` is, or None."""
        head, _, tail = self.topic.partition("{tenant}")
        if not (topic.startswith(head) and topic.endswith(tail)):
            return None
        name = topic[len(head) : len(topic) - len(tail)] if tail else topic[len(head) :]
        return name if re.fullmatch(TENANT_PATTERN, name) else None


class Subscriptions(_Frozen):
    start: Subscription
    dead_letter: Subscription
    results: Subscription
    signals: Subscription | None = None


class Queue(_Frozen):
    name: str = Field(pattern=f"^{QUEUE_ID_PATTERN}$")
    # Queues of this kind: shard 0 is ``name``, shard i >= 1 ``name-i`` (``shard_name``).
    shards: int = Field(default=1, ge=1, le=MAX_QUEUE_SHARDS)
    max_dispatches_per_second: float = Field(gt=0, le=500)
    max_concurrent_dispatches: int = Field(gt=0, le=5000)
    max_attempts: int = Field(ge=-1)
    max_retry_duration_s: int = Field(ge=0)
    min_backoff_s: float = Field(ge=0)
    max_backoff_s: float = Field(ge=0)
    max_doublings: int = Field(ge=0)
    dispatch_deadline_s: int = Field(ge=15, le=1800)

    def shard_queues(self) -> list[Queue]:
        """One queue per shard, each with its own name and this kind's settings."""
        return [
            self.model_copy(update={"name": shard_name(self.name, i)}) for i in range(self.shards)
        ]


class Queues(_Frozen):
    steps: Queue
    polls: Queue
    # High-priority tenants' and messages' tasks: dispatched beside, not behind, the backlog of
    # the two above (Cloud Tasks dispatches each queue on its own).
    steps_high: Queue | None = None
    polls_high: Queue | None = None

    @model_validator(mode="after")
    def _one_count_and_distinct_names(self) -> Queues:
        counts = {q.name: q.shards for q in self.all()}
        if len(set(counts.values())) != 1:
            raise ValueError(
                f"every queue kind needs the same shards (a flow's tasks all go to one shard "
                f"number), not {counts}"
            )
        names = [q.name for q in self.provisioned()]
        if any(len(n) > 100 for n in names) or len(set(names)) != len(names):
            raise ValueError(f"the queues' shard names must be distinct ids of <= 100: {names}")
        return self

    @property
    def shards(self) -> int:
        """Queues of each kind (the same for every kind)."""
        return self.steps.shards

    def all(self) -> list[Queue]:
        """Every kind of queue, the pair that serves everyone first (shard 0's settings)."""
        return [q for q in (self.steps, self.polls, self.steps_high, self.polls_high) if q]

    def provisioned(self) -> list[Queue]:
        """Every queue that exists: each kind's shards, in kind order then shard order."""
        return [shard for kind in self.all() for shard in kind.shard_queues()]

    def with_shards(self, shards: int) -> Queues:
        """These queues with ``shards`` queues of each kind."""
        return self._updated({"shards": shards})

    def with_rate(self, max_dispatches_per_second: float) -> Queues:
        """These queues each limited to ``max_dispatches_per_second`` (a scaled-down bench)."""
        return self._updated({"max_dispatches_per_second": max_dispatches_per_second})

    def _updated(self, update: dict[str, object]) -> Queues:
        """Every kind with ``update``, validated again (a bad value is refused here)."""
        kinds = self.model_dump(exclude_none=True)
        return Queues.model_validate({role: spec | update for role, spec in kinds.items()})


class FirestoreNames(_Frozen):
    model_config = ConfigDict(frozen=True, extra="ignore")  # "_shards_comment"

    # Index shards of the collections written at the flow rate (relayflow.gcp.store.keys):
    # may grow, never shrink.
    shards: int = Field(default=128, ge=1, le=1024)
    flows_collection: str
    rejected_collection: str
    lanes_collection: str = "flow_lanes"
    tenant_slots_collection: str = "tenant_slots"
    tenants_collection: str = "tenants"
    breakers_collection: str = "breakers"
    breaker_windows_collection: str = "breaker_windows"
    # Bulk actions (``bulk_actions/{id}``) and their rows' chunks (a subcollection of each).
    bulk_actions_collection: str = "bulk_actions"
    bulk_rows_collection: str = "bulk_rows"


class Topology(_Frozen):
    model_config = ConfigDict(frozen=True, extra="ignore")

    topics: Topics
    tenant_requests: TenantRequests = TenantRequests()
    subscriptions: Subscriptions
    queues: Queues
    firestore: FirestoreNames


def topic_of_subscription(topology: Topology, subscription: str) -> str | None:
    """The topic a subscription of ours reads (the shared and each tenant's start
    subscription, the signals one), or None: where a dead letter it gave up goes back to."""
    subscriptions = topology.subscriptions
    for known in (subscriptions.start, subscriptions.signals):
        if known is not None and known.name == subscription:
            return known.topic
    names = topology.tenant_requests
    head, _, tail = names.subscription.partition("{tenant}")
    if (
        subscription.startswith(head)
        and subscription.endswith(tail)
        and len(subscription) > len(head + tail)
    ):
        tenant = subscription[len(head) : len(subscription) - len(tail)]
        if re.fullmatch(TENANT_PATTERN, tenant):
            return names.topic_of(tenant)
    return None


def topic_of_source(source: str | None) -> str | None:
    """The topic a ``messagePublished`` CloudEvent came by, from its ``source``
    (``//pubsub.googleapis.com/projects/P/topics/T``): Eventarc sets it, and
    functions-framework does when the push endpoint's path names the topic."""
    head, sep, topic = (source or "").rpartition("/topics/")
    return topic if sep and "/projects/" in f"{head}/" and topic and "/" not in topic else None


def tenant_of_topic(topology: Topology, topic: str | None) -> str:
    """Whose start message came by ``topic``: a tenant's own topic is that tenant's; the
    shared topic (or one not known) starts the default tenant's flows only."""
    return (topic and topology.tenant_requests.tenant_of(topic)) or DEFAULT_TENANT


def with_queue_shards(topology: Topology, shards: int | None) -> Topology:
    """``topology`` with ``shards`` queues of each kind (None: as the file says): the
    environment's count (``Settings.queue_shards``) over the file's."""
    if shards is None or shards == topology.queues.shards:
        return topology
    return topology.model_copy(update={"queues": topology.queues.with_shards(shards)})


@lru_cache(maxsize=1)
def load_topology() -> Topology:
    """The packaged topology.json, parsed and validated."""
    text = resources.files("relayflow").joinpath("topology.json").read_text(encoding="utf-8")
    return Topology.model_validate(json.loads(text))

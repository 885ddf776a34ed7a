"""List prices of the services a flow uses, and what a million flows cost at them.

Prices are USD list prices for a Tier 1 region (us-central1), from the public pricing pages:

- Cloud Run, https://cloud.google.com/run/pricing : services with CPU allocated only during
  request processing (request-based billing), Tier 1: $0.00002400 per vCPU-second,
  $0.00000250 per GiB-second, $0.40 per million requests. Billable time is rounded up to the
  nearest 100 ms. Cloud Run functions (the start function) are billed the same way.
- Firestore (Standard edition), https://cloud.google.com/firestore/pricing : us-central1
  $0.03 per 100,000 document reads, $0.09 per 100,000 writes, $0.01 per 100,000 deletes (the
  nam5 multi-region is twice that). TTL deletes are billed as deletes.
- Cloud Tasks, https://cloud.google.com/tasks/pricing : $0.40 per million billable operations
  beyond the first million a month; an operation is an API call or a push delivery attempt,
  per 32 KB chunk of the task.
- Pub/Sub, https://cloud.google.com/pubsub/pricing : throughput (publish and delivery) $40 per
  TiB; at least 1000 bytes are billed per publish, push or pull request.

Free tiers are left out: these are marginal costs, what one more million flows add to a bill.
"""

from __future__ import annotations

from dataclasses import dataclass

CLOUD_RUN_VCPU_S_USD = 0.000024
CLOUD_RUN_GIB_S_USD = 0.0000025
CLOUD_RUN_REQUEST_USD = 0.40 / 1_000_000
FIRESTORE_READ_USD = 0.03 / 100_000
FIRESTORE_WRITE_USD = 0.09 / 100_000
FIRESTORE_DELETE_USD = 0.01 / 100_000
CLOUD_TASKS_OPERATION_USD = 0.40 / 1_000_000
PUBSUB_TIB_USD = 40.0
PUBSUB_MIN_BYTES_PER_REQUEST = 1000
TIB = 2**40


@dataclass(frozen=True)
class Instance:
    """How the Cloud Run services are deployed, and how busy CPU time becomes billed time.

    ``instance_s_per_cpu_s`` is the stated assumption: billed instance time (an instance is
    billed while it handles at least one request) divided by the CPU time its handlers use.
    1.0 is a saturated instance, whose requests overlap so that its one vCPU is never idle
    while it is billed; above 1 counts the time handlers wait on Firestore, Cloud Tasks and
    the client API with no other request to fill it.
    """

    vcpu: float = 1.0
    memory_gib: float = 0.5
    instance_s_per_cpu_s: float = 1.0


@dataclass(frozen=True)
class FlowUsage:
    """What one flow uses of each billed resource (averages over a batch)."""

    cloud_run_cpu_s: float  # CPU seconds in Cloud Run services and functions
    cloud_run_requests: float
    firestore_reads: float
    firestore_writes: float
    firestore_deletes: float
    tasks_operations: float  # task creates + push delivery attempts
    pubsub_requests: float  # publishes + push/pull deliveries, each under 1000 bytes


def cost_per_million(usage: FlowUsage, instance: Instance) -> dict[str, float]:
    """USD per million flows, by line, with their ``total``."""
    instance_s = usage.cloud_run_cpu_s * instance.instance_s_per_cpu_s / instance.vcpu
    lines = {
        "cloud_run_cpu": instance_s * instance.vcpu * CLOUD_RUN_VCPU_S_USD,
        "cloud_run_memory": instance_s * instance.memory_gib * CLOUD_RUN_GIB_S_USD,
        "cloud_run_requests": usage.cloud_run_requests * CLOUD_RUN_REQUEST_USD,
        "firestore_reads": usage.firestore_reads * FIRESTORE_READ_USD,
        "firestore_writes": usage.firestore_writes * FIRESTORE_WRITE_USD,
        "firestore_deletes": usage.firestore_deletes * FIRESTORE_DELETE_USD,
        "cloud_tasks": usage.tasks_operations * CLOUD_TASKS_OPERATION_USD,
        "pubsub": usage.pubsub_requests * PUBSUB_MIN_BYTES_PER_REQUEST / TIB * PUBSUB_TIB_USD,
    }
    per_million = {name: round(usd * 1_000_000, 3) for name, usd in lines.items()}
    per_million["total"] = round(sum(lines.values()) * 1_000_000, 3)
    return per_million

"""The published limits the capacity model holds relayflow's load against, each with its source.

Where the documentation has said different things over time (or two pages differ), the
stricter reading is the one here, and the note says so.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limit:
    """A published limit: its value, its unit, where it is documented, and how it is read."""

    value: float
    unit: str
    source: str
    note: str = ""


FIRESTORE_SEQUENTIAL_INDEX = Limit(
    500.0,
    "writes/s",
    "https://docs.cloud.google.com/firestore/native/docs/solutions/shard-timestamp",
    "a collection whose documents carry a monotonically increasing indexed field (a single-field"
    " index, or a composite index range) takes 500 writes/s; N shards leading the index: 500 x N"
    " (soft limit: https://docs.cloud.google.com/firestore/quotas)",
)
FIRESTORE_KEY_RANGE = Limit(
    500.0,
    "writes/s",
    "https://docs.cloud.google.com/firestore/docs/best-practices"
    "#high_read_write_and_delete_rates_to_a_narrow_document_range",
    "writes to lexicographically close document ids land on one tablet; read as the 500 ops/s"
    " a new key range starts with under the 500/50/5 rule",
)
FIRESTORE_DOCUMENT = Limit(
    1.0,
    "writes/s",
    "https://docs.cloud.google.com/firestore/docs/best-practices#updates_to_a_single_document",
    "sustained writes to one document; the quotas page once stated 'maximum sustained write rate"
    " to a document: 1 per second' and no longer does: the stricter reading is kept. Sustained is"
    " read over 10 s (relayflow.capacity.model.SUSTAINED_S): the most writes in any 10 s of a"
    " document's life, over 10 s",
)
FIRESTORE_RAMP = Limit(
    500.0,
    "ops/s",
    "https://docs.cloud.google.com/firestore/docs/best-practices#ramping_up_traffic",
    "the 500/50/5 rule: start at 500 operations/s, grow by at most 50 % every 5 minutes"
    " (Cloud Tasks asks the same of queues: https://docs.cloud.google.com/tasks/docs/manage-cloud-task-scaling)",
)
TASKS_QUEUE_DISPATCH = Limit(
    500.0,
    "dispatches/s",
    "https://docs.cloud.google.com/tasks/docs/reference/rest/v2/projects.locations.queues#ratelimits",
    "per queue: RateLimits.max_dispatches_per_second is at most 500 (system limit, also"
    " https://docs.cloud.google.com/tasks/docs/quotas); the configured rate binds first",
)
TASKS_API = Limit(
    6_000_000 / 60,
    "requests/s",
    "https://docs.cloud.google.com/tasks/docs/quotas",
    "API requests per region: 6,000,000 per minute (a quota: raised on request)",
)
PUBSUB_PUBLISH = Limit(
    3_000_000 / 60,
    "kB/s",
    "https://docs.cloud.google.com/pubsub/quotas",
    "publisher throughput per region: 3,000,000 kB per minute in small regions (12,000,000 in"
    " europe-west1, us-central1, us-east1); each request counts at least 1 kB",
)
CLOUD_RUN_MAX_INSTANCES = Limit(
    1000.0,
    "instances",
    "https://docs.cloud.google.com/run/docs/configuring/max-instances-limits",
    "per service: the regional instance-limit quota's baseline, 1,000 instances of 1 vCPU (also"
    " bounded by the regional CPU quota over the service's vCPUs; raised on request). The page"
    " once gave 100 as every service's default maximum: that is a setting, which the Terraform"
    " sets per environment (envs/ENV/sizing.tf), not a limit",
)
CLOUD_RUN_CONCURRENCY = Limit(
    1000.0,
    "requests",
    "https://docs.cloud.google.com/run/docs/about-concurrency",
    "concurrent requests per instance: at most 1,000 (default 80 per vCPU)",
)
CLOUD_RUN_REGION_VCPU = Limit(
    1000.0,
    "vCPU",
    "https://docs.cloud.google.com/run/quotas",
    "regional CPU allocation quota, all services together: the 1,000 vCPU baseline the"
    " max-instances page gives as its example (the project's own is on its quotas page)",
)

# Target utilisation: no resource above 70 % of its limit at the target rate (issue 20).
TARGET_SHARE = 0.70

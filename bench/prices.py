"""List prices of the services a flow uses, and what a million flows cost at them.

    python bench/prices.py [--rate 10000] [--location nam5] [--writes 6.97] [--cpu-ms 8.9] …

Prints, for a sustained rate of flows a second, the cost per million flows with a line per
service, for both Cloud Run billing modes, with Firestore in the given location (default: the
one every environment's Terraform creates), and the totals in the other priced location. The
per-flow figures default to a measured run (below); each has a flag to price another.

Prices are USD list prices, from the public pricing pages; the free tiers are left out (these
are marginal costs, what one more million flows add to a bill):

- Firestore (Standard edition), https://cloud.google.com/firestore/pricing ("Pricing by
  location"): per 100,000 documents, the ``nam5`` multi-region (United States) $0.06 reads,
  $0.18 writes, $0.02 deletes; the ``us-central1`` region $0.03, $0.09, $0.01. A multi-region
  costs twice a region. TTL deletes are billed as deletes. Every environment defaults to
  ``nam5`` (``firestore_location`` in infra/terraform/envs/*/variables.tf), so that is what we
  price unless told otherwise.
- Cloud Run, https://cloud.google.com/run/pricing, Tier 1 (us-central1, every environment's
  ``region``): request-based billing (CPU allocated only while requests are served, the
  services' setting today: ``cpu_idle = true``) $0.00002400 per vCPU-second, $0.00000250 per
  GiB-second and $0.40 per million requests; instance-based billing (CPU always allocated)
  $0.00001800 per vCPU-second, $0.00000200 per GiB-second and no fee per request. Billable
  time is rounded up to the nearest 100 ms; with concurrency above 1, requests in flight
  together share their instance's billed time. Cloud Run functions (the start function) are
  billed the same way. Committed use discounts, https://cloud.google.com/run/cud: 17 % off
  request-based billing for a one-year commitment; flexible CUDs 28 % (one year) and 46 %
  (three years) off instance-based billing.
- Cloud Run autoscaling, https://cloud.google.com/run/docs/configuring/scaling-controls: the
  autoscaler keeps instances at a 60 % target for CPU and for concurrency by default, so a
  sustained load runs 1 / 0.6 of the vCPUs its requests use.
- Cloud Tasks, https://cloud.google.com/tasks/pricing : $0.40 per million billable operations
  beyond the first million a month, up to 5 billion a month ("more than 5 billion: contact
  sales"); an operation is an API call or a push delivery attempt, per 32 KB chunk of the task.
  At 10,000 flows/s a month holds about 200 billion operations: past the published list, so
  we price them at the last published rate and say so.
- Pub/Sub, https://cloud.google.com/pubsub/pricing : throughput (publish and delivery) $40 per
  TiB; at least 1000 bytes are billed per publish, push or pull request.

The per-flow defaults (``MEASURED``) come from ``bench/e2e_flows.py --flows 100 --base-port
9100`` on main after the issue-20 merges (2026-12-03, this 2-core machine, with a chaos run
beside it): 100 reference flows, all SUCCEEDED, 2.86 polls a flow; per flow 4.84 Firestore
reads, 4.09 writes (4 to the flow's document whatever its polls, the start function's create
included; 0.09 breaker windows) and the TTL delete, 3.86 tasks created and 3.86 dispatched (7.72
billable task operations), 4.86 Cloud Run requests (the dispatches and one start push), 2
Pub/Sub messages (the start message and the result event, each published and delivered once),
and 0.0449 s of Cloud Run CPU (start function, worker, poller, sweeper): 9.24 ms per request
(start 7.1, action 9.9, poll 9.65 ms). Before (3f7934b): 6.97 writes, 8.9 ms. A request's wall
time is not measured there; we take 5 times its CPU (``WALL_PER_CPU``): a lone flow's action and
poll requests hold their thread 5 to 8 times the CPU they use on the local stack
(``bench/occupancy.py --plan 5:1``), waiting on Firestore, Cloud Tasks and the client API. It
only decides how often a request-based instance sits idle between requests, which at the target
rate is seldom.

How Cloud Run's bill follows from a rate R (``cost_at_rate``): requests arrive at
R * requests-per-flow a second and use R * requests * CPU-per-request vCPUs, so the
autoscaler runs N = ceil(max(vCPUs / (vCPU per instance * 60 %), requests in flight /
(concurrency * 60 %))) instances (at least the minimum). Instance-based billing bills all of
their time. Request-based billing bills an instance while it has a request in flight: with
λ requests in flight per instance on average (Poisson arrivals), it is idle e^-λ of the time;
each busy period is rounded up to 100 ms, which we count in full (the stricter reading).
Idle minimum instances under request-based billing (billed at a reduced idle rate) are left out.
At 10,000 flows/s an instance at its 60 % CPU target has about 3 requests in flight and its
idle gaps are a few milliseconds long, which the rounding fills: request-based billing then
bills all of the instances' time, at a third more per vCPU-second than instance-based billing,
and adds its fee per request. A sustained rate is cheaper on instance-based billing.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

CLOUD_RUN_VCPU_S_USD = 0.000024
CLOUD_RUN_GIB_S_USD = 0.0000025
CLOUD_RUN_REQUEST_USD = 0.40 / 1_000_000
CLOUD_TASKS_OPERATION_USD = 0.40 / 1_000_000
CLOUD_TASKS_LISTED_OPERATIONS_PER_MONTH = 5_000_000_000
PUBSUB_TIB_USD = 40.0
PUBSUB_MIN_BYTES_PER_REQUEST = 1000
TIB = 2**40
BILLING_ROUNDING_S = 0.1  # Cloud Run rounds billable time up to the nearest 100 ms
HOURS_PER_MONTH = 730  # Google Cloud's pricing pages count a month as 730 hours


@dataclass(frozen=True)
class FirestorePrices:
    """USD per document read, write and delete in one Firestore location."""

    read: float
    write: float
    delete: float


FIRESTORE = {
    "nam5": FirestorePrices(read=0.06 / 100_000, write=0.18 / 100_000, delete=0.02 / 100_000),
    "us-central1": FirestorePrices(
        read=0.03 / 100_000, write=0.09 / 100_000, delete=0.01 / 100_000
    ),
}
# firestore_location's default in every infra/terraform/envs/*/variables.tf (a test checks).
DEFAULT_LOCATION = "nam5"


@dataclass(frozen=True)
class CloudRunPrices:
    """USD per vCPU-second, GiB-second and request under one Cloud Run billing mode."""

    vcpu_s: float
    gib_s: float
    request: float


# Tier 1 (us-central1). Request-based billing is what the services are deployed with today.
CLOUD_RUN = {
    "request_based": CloudRunPrices(
        CLOUD_RUN_VCPU_S_USD, CLOUD_RUN_GIB_S_USD, CLOUD_RUN_REQUEST_USD
    ),
    "instance_based": CloudRunPrices(vcpu_s=0.000018, gib_s=0.000002, request=0.0),
}
# Committed use discounts on Cloud Run's lines, by billing mode and term.
CLOUD_RUN_CUD = {
    "request_based": {"1 year": 0.17},
    "instance_based": {"1 year": 0.28, "3 years": 0.46},
}
CLOUD_RUN_LINES = ("cloud_run_cpu", "cloud_run_memory", "cloud_run_requests")
WALL_PER_CPU = 5.0  # a request's wall time over its CPU time: see the module docstring


def firestore_prices(location: str) -> FirestorePrices:
    """The Firestore prices of ``location``; a clear error for one we have no prices for."""
    try:
        return FIRESTORE[location]
    except KeyError:
        known = ", ".join(sorted(FIRESTORE))
        raise ValueError(
            f"no Firestore prices for location {location!r} (known: {known})"
        ) from None


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


def cost_per_million(
    usage: FlowUsage, instance: Instance, location: str = DEFAULT_LOCATION
) -> dict[str, float]:
    """USD per million flows, by line, with their ``total``, at request-based Cloud Run
    prices with billed instance time stated as a factor of CPU time (bench/e2e_flows.py)."""
    firestore = firestore_prices(location)
    instance_s = usage.cloud_run_cpu_s * instance.instance_s_per_cpu_s / instance.vcpu
    lines = {
        "cloud_run_cpu": instance_s * instance.vcpu * CLOUD_RUN_VCPU_S_USD,
        "cloud_run_memory": instance_s * instance.memory_gib * CLOUD_RUN_GIB_S_USD,
        "cloud_run_requests": usage.cloud_run_requests * CLOUD_RUN_REQUEST_USD,
        "firestore_reads": usage.firestore_reads * firestore.read,
        "firestore_writes": usage.firestore_writes * firestore.write,
        "firestore_deletes": usage.firestore_deletes * firestore.delete,
        "cloud_tasks": usage.tasks_operations * CLOUD_TASKS_OPERATION_USD,
        "pubsub": usage.pubsub_requests * PUBSUB_MIN_BYTES_PER_REQUEST / TIB * PUBSUB_TIB_USD,
    }
    per_million = {name: round(usd * 1_000_000, 3) for name, usd in lines.items()}
    per_million["total"] = round(sum(lines.values()) * 1_000_000, 3)
    return per_million


@dataclass(frozen=True)
class FlowOps:
    """What one flow does, on average, of everything that is billed."""

    firestore_reads: float
    firestore_writes: float
    firestore_deletes: float
    task_operations: float  # task creates (ALREADY_EXISTS answers too) + push deliveries
    pubsub_messages: float  # each published once and delivered once (one subscriber)
    pubsub_message_bytes: float
    cloud_run_requests: float
    cpu_s_per_request: float
    wall_s_per_request: float

    def __post_init__(self) -> None:
        negative = [f.name for f in fields(self) if getattr(self, f.name) < 0]
        if negative:
            raise ValueError(f"per-flow figures cannot be negative: {', '.join(negative)}")


MEASURED = FlowOps(
    firestore_reads=4.84,
    firestore_writes=4.09,
    firestore_deletes=1.0,
    task_operations=7.72,
    pubsub_messages=2.0,
    pubsub_message_bytes=PUBSUB_MIN_BYTES_PER_REQUEST,  # both are well under the minimum
    cloud_run_requests=4.86,
    cpu_s_per_request=0.00924,
    wall_s_per_request=0.00924 * WALL_PER_CPU,
)


@dataclass(frozen=True)
class CloudRunService:
    """How the Cloud Run services are sized: the Terraform defaults, Cloud Run's targets."""

    vcpu: float = 1.0
    memory_gib: float = 0.5
    concurrency: int = 8  # the Terraform's, from the capacity model (envs/ENV/sizing.tf)
    cpu_target: float = 0.6
    concurrency_target: float = 0.6
    min_instances: int = 0

    def __post_init__(self) -> None:
        if self.vcpu <= 0 or self.memory_gib <= 0 or self.concurrency < 1:
            raise ValueError("vcpu and memory_gib must be positive and concurrency at least 1")
        if not (0 < self.cpu_target <= 1 and 0 < self.concurrency_target <= 1):
            raise ValueError("cpu_target and concurrency_target must be in (0, 1]")
        if self.min_instances < 0:
            raise ValueError("min_instances cannot be negative")


def instances_needed(ops: FlowOps, rate_per_s: float, service: CloudRunService) -> int:
    """Instances the autoscaler runs for ``rate_per_s`` flows a second: enough that neither
    CPU nor requests in flight pass their target share of what the instances have."""
    requests_per_s = rate_per_s * ops.cloud_run_requests
    by_cpu = requests_per_s * ops.cpu_s_per_request / (service.vcpu * service.cpu_target)
    in_flight = requests_per_s * ops.wall_s_per_request
    by_concurrency = in_flight / (service.concurrency * service.concurrency_target)
    # A hair of tolerance so that float noise in an exact fit does not add an instance.
    needed = math.ceil(max(by_cpu, by_concurrency) - 1e-9)
    return max(needed, service.min_instances, 1 if requests_per_s > 0 else 0)


def billed_instance_s_per_s(ops: FlowOps, rate_per_s: float, instances: int, billing: str) -> float:
    """Instance-seconds billed per second of the sustained rate, under ``billing``."""
    if billing == "instance_based" or instances == 0:
        return float(instances)
    if billing != "request_based":
        raise ValueError(f"unknown billing mode {billing!r} (known: {', '.join(CLOUD_RUN)})")
    arrivals = rate_per_s * ops.cloud_run_requests / instances  # per instance
    in_flight = arrivals * ops.wall_s_per_request
    idle = math.exp(-in_flight)
    # A busy period starts with each request that finds its instance idle.
    rounding = arrivals * idle * BILLING_ROUNDING_S
    return instances * min(1.0, 1.0 - idle + rounding)


@dataclass(frozen=True)
class RateCost:
    """What a million flows cost at a sustained rate, per billing mode of Cloud Run."""

    rate_per_s: float
    location: str
    instances: int
    lines: dict[str, dict[str, float]]  # billing mode -> line -> USD per million flows

    def total(self, billing: str, cud: str | None = None) -> float:
        """The total under ``billing``, with Cloud Run's lines discounted by the ``cud`` term."""
        lines = self.lines[billing]
        discount = CLOUD_RUN_CUD[billing][cud] if cud else 0.0
        cloud_run = sum(lines[name] for name in CLOUD_RUN_LINES)
        return lines["total"] - cloud_run * discount

    def per_month(self, billing: str) -> float:
        """USD a month of this rate costs (730 hours), before discounts."""
        flows = self.rate_per_s * HOURS_PER_MONTH * 3600
        return self.lines[billing]["total"] * flows / 1_000_000


def _other_lines(ops: FlowOps, location: str) -> dict[str, float]:
    """USD per flow of everything but Cloud Run."""
    firestore = firestore_prices(location)
    billed_bytes = max(ops.pubsub_message_bytes, PUBSUB_MIN_BYTES_PER_REQUEST)
    return {
        "firestore_reads": ops.firestore_reads * firestore.read,
        "firestore_writes": ops.firestore_writes * firestore.write,
        "firestore_deletes": ops.firestore_deletes * firestore.delete,
        "cloud_tasks": ops.task_operations * CLOUD_TASKS_OPERATION_USD,
        # A publish and a delivery for each message.
        "pubsub": 2 * ops.pubsub_messages * billed_bytes / TIB * PUBSUB_TIB_USD,
    }


def _cloud_run_lines(
    ops: FlowOps, rate_per_s: float, service: CloudRunService, instances: int, billing: str
) -> dict[str, float]:
    """USD per flow of Cloud Run under ``billing``."""
    prices = CLOUD_RUN[billing]
    instance_s = billed_instance_s_per_s(ops, rate_per_s, instances, billing) / rate_per_s
    return {
        "cloud_run_cpu": instance_s * service.vcpu * prices.vcpu_s,
        "cloud_run_memory": instance_s * service.memory_gib * prices.gib_s,
        "cloud_run_requests": ops.cloud_run_requests * prices.request,
    }


def cost_at_rate(
    ops: FlowOps,
    rate_per_s: float,
    location: str = DEFAULT_LOCATION,
    service: CloudRunService | None = None,
) -> RateCost:
    """USD per million flows at a sustained ``rate_per_s``, a line per service and a
    ``total``, for each Cloud Run billing mode, with Firestore in ``location``."""
    if not rate_per_s > 0:
        raise ValueError(f"rate_per_s must be positive, not {rate_per_s}")
    service = service or CloudRunService()
    instances = instances_needed(ops, rate_per_s, service)
    others = _other_lines(ops, location)
    lines: dict[str, dict[str, float]] = {}
    for billing in CLOUD_RUN:
        usd = {**_cloud_run_lines(ops, rate_per_s, service, instances, billing), **others}
        per_million = {name: value * 1_000_000 for name, value in usd.items()}
        per_million["total"] = sum(per_million.values())
        lines[billing] = per_million
    return RateCost(rate_per_s, location, instances, lines)


@dataclass(frozen=True)
class CostTerms:
    """A flow's list-price cost as a result event can tell it (docs/analytics.md prices each
    ended flow in BigQuery this way): ``per_flow_usd`` whatever it did, and ``per_try_usd`` for
    each of its polls and attempts."""

    per_flow_usd: float
    per_try_usd: float

    def usd(self, tries: float) -> float:
        return self.per_flow_usd + self.per_try_usd * tries


def cost_terms(
    ops: FlowOps = MEASURED,
    location: str = DEFAULT_LOCATION,
    service: CloudRunService | None = None,
) -> CostTerms:
    """Split what a measured flow costs into what every flow costs and what each try adds.

    A try (a poll or an attempt) is one task, created once and dispatched once, so a flow's
    tries are its task operations / 2 (the reference flow: 1 attempt and 2.86 polls). Per flow:
    Pub/Sub (the start message and the result event), the TTL delete and the Cloud Run
    requests beyond the tries (the start push). Per try: its task operations, its request and
    that request's CPU and memory, and every Firestore read and write, spread over the tries
    (a poll chain writes at checkpoints only, so this prices a poll's writes high and a step's
    low). Cloud Run at request-based list prices with billed time = CPU time: a busy instance
    at a sustained rate, the stricter reading's opposite only when traffic is sparse.
    """
    service = service or CloudRunService()
    firestore = firestore_prices(location)
    prices = CLOUD_RUN["request_based"]
    tries = ops.task_operations / 2
    if tries <= 0:
        raise ValueError("the figures price no try: task_operations must be positive")
    instance_s = ops.cpu_s_per_request / service.vcpu
    per_request = (
        prices.request
        + instance_s * service.vcpu * prices.vcpu_s
        + instance_s * service.memory_gib * prices.gib_s
    )
    others = _other_lines(ops, location)
    per_flow = (
        others["pubsub"]
        + others["firestore_deletes"]
        + max(ops.cloud_run_requests - tries, 0.0) * per_request
    )
    per_tries = (
        tries * per_request
        + others["cloud_tasks"]
        + ops.firestore_reads * firestore.read
        + ops.firestore_writes * firestore.write
    )
    return CostTerms(per_flow_usd=per_flow, per_try_usd=per_tries / tries)


def beyond_task_price_list(ops: FlowOps, rate_per_s: float) -> bool:
    """Whether a month at this rate makes more task operations than Cloud Tasks prices."""
    per_month = ops.task_operations * rate_per_s * HOURS_PER_MONTH * 3600
    return per_month > CLOUD_TASKS_LISTED_OPERATIONS_PER_MONTH


def table(cost: RateCost, others: Sequence[RateCost] = ()) -> str:
    """The cost as printed: a row per line, a column per billing mode."""
    modes = list(CLOUD_RUN)
    rows = [f"{'USD per million flows':32}" + "".join(f"{m.replace('_', '-'):>16}" for m in modes)]
    for name in cost.lines[modes[0]]:
        rows.append(f"{name:32}" + "".join(f"{cost.lines[m][name]:16.2f}" for m in modes))
    for term in ("1 year", "3 years"):
        cells = [
            f"{cost.total(m, term):16.2f}" if term in CLOUD_RUN_CUD[m] else f"{'-':>16}"
            for m in modes
        ]
        rows.append(f"{'total, Cloud Run CUD ' + term:32}" + "".join(cells))
    rows.append(
        f"{'USD a month at this rate':32}" + "".join(f"{cost.per_month(m):16,.0f}" for m in modes)
    )
    for other in others:
        label = f"total, Firestore in {other.location}"
        rows.append(f"{label:32}" + "".join(f"{other.total(m):16.2f}" for m in modes))
    return "\n".join(rows)


def header(ops: FlowOps, cost: RateCost, service: CloudRunService) -> str:
    """What the table prices: the rate, the location, the per-flow figures, the fleet."""
    default = " (the Terraform default)" if cost.location == DEFAULT_LOCATION else ""
    return "\n".join(
        [
            f"{cost.rate_per_s:,.0f} flows/s; Firestore in {cost.location}{default}; Cloud Run "
            "and Cloud Tasks in us-central1 (Tier 1); list prices, no free tiers",
            f"per flow: Firestore writes / reads / deletes {ops.firestore_writes:g} / "
            f"{ops.firestore_reads:g} / {ops.firestore_deletes:g}, task operations "
            f"{ops.task_operations:g}, Pub/Sub messages {ops.pubsub_messages:g}, Cloud Run "
            f"requests {ops.cloud_run_requests:g} x {ops.cpu_s_per_request * 1000:.2f} ms CPU "
            f"({ops.wall_s_per_request * 1000:.1f} ms wall)",
            f"Cloud Run instances: {cost.instances:,} x ({service.vcpu:g} vCPU, "
            f"{service.memory_gib:g} GiB), concurrency {service.concurrency}, "
            f"{service.cpu_target:.0%} CPU target",
        ]
    )


# CLI flag -> (FlowOps field, scale from the flag's unit, help)
FLOW_FLAGS = {
    "--reads": ("firestore_reads", 1.0, "Firestore reads per flow"),
    "--writes": ("firestore_writes", 1.0, "Firestore writes per flow"),
    "--deletes": ("firestore_deletes", 1.0, "Firestore deletes per flow"),
    "--task-ops": ("task_operations", 1.0, "Cloud Tasks operations per flow"),
    "--messages": ("pubsub_messages", 1.0, "Pub/Sub messages per flow"),
    "--requests": ("cloud_run_requests", 1.0, "Cloud Run requests per flow"),
    "--cpu-ms": ("cpu_s_per_request", 0.001, "CPU ms per Cloud Run request"),
    "--wall-ms": ("wall_s_per_request", 0.001, "wall ms per Cloud Run request"),
}


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=10_000.0, help="flows a second")
    parser.add_argument("--location", choices=sorted(FIRESTORE), default=DEFAULT_LOCATION)
    parser.add_argument("--concurrency", type=int, default=CloudRunService.concurrency)
    parser.add_argument("--min-instances", type=int, default=0)
    for flag, (_, _, help_) in FLOW_FLAGS.items():
        parser.add_argument(flag, type=float, help=f"{help_} (default: the measured run's)")
    args = parser.parse_args(argv)
    if args.rate <= 0:
        parser.error("--rate must be positive")
    return args


def flow_ops(args: argparse.Namespace) -> FlowOps:
    """The measured figures, with those the flags give in their place."""
    given = {
        field: getattr(args, flag[2:].replace("-", "_")) * scale
        for flag, (field, scale, _) in FLOW_FLAGS.items()
        if getattr(args, flag[2:].replace("-", "_")) is not None
    }
    ops = replace(MEASURED, **given)
    if args.cpu_ms is not None and args.wall_ms is None:
        ops = replace(ops, wall_s_per_request=ops.cpu_s_per_request * WALL_PER_CPU)
    return ops


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    try:
        ops = flow_ops(args)
        service = CloudRunService(concurrency=args.concurrency, min_instances=args.min_instances)
    except ValueError as error:
        print(f"prices.py: {error}", file=sys.stderr)
        return 2
    cost = cost_at_rate(ops, args.rate, args.location, service)
    others = [
        cost_at_rate(ops, args.rate, loc, service) for loc in FIRESTORE if loc != args.location
    ]
    print(header(ops, cost, service))
    print()
    print(table(cost, others))
    terms = cost_terms(ops, args.location, service)
    print(
        f"\nper ended flow, as docs/analytics.md prices a result event: "
        f"{terms.per_flow_usd * 1e6:.2f} + {terms.per_try_usd * 1e6:.2f} x (polls + attempts) "
        "USD per million flows"
    )
    if beyond_task_price_list(ops, args.rate):
        print(
            "\nnote: a month at this rate makes more than the 5 billion task operations Cloud "
            "Tasks lists a price for (past it: contact sales); priced at the listed $0.40/M"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

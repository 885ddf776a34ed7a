"""The capacity model: from what runs of each flow shape did (their recorded operations and
CPU) and what the deployment configures, the load a rate of R flows per second puts on every
limited resource, against its published limit.

Every load is linear in R (``per_flow`` x R), except a flow document's own sustained write
rate, which depends on how fast one flow goes, not on how many run (``constant``). A resource's
ceiling is the R at which its load reaches its limit; the deployment's ceiling is the lowest.
A mix of shapes weights each shape's per-flow figures (``Mix``).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from relayflow.capacity import limits, rules
from relayflow.capacity.deployment import Deployment
from relayflow.capacity.limits import Limit
from relayflow.capacity.oplog import FS_READ, FS_WRITE, PUBLISH, TASK_CREATE, Op, of_kind

# Cloud Run: a handler holds its thread (and its request slot) 5 to 8 times the CPU it uses,
# waiting on Firestore, Cloud Tasks and the client API (bench/occupancy.py, bench/e2e_flows.py):
# the upper end sizes the threads and the concurrency.
WALL_PER_CPU = 8.0
# The window over which one document's writes count as sustained (limits.FIRESTORE_DOCUMENT).
SUSTAINED_S = 10.0
# Ids spread over the key space: the hottest of this many even key ranges takes its share.
SPREAD_RANGES = 256
# Which queue kinds each task-handling service serves (relayflow.runtime.task_targets).
SERVICE_QUEUES = {"worker": ("steps", "steps_high"), "poller": ("polls", "polls_high")}
START_SERVICE = "start-flow"


@dataclass(frozen=True)
class ShapeRun:
    """What a run of ``flows`` flows of one shape did: its operations and the CPU seconds each
    Cloud Run service (by its Terraform name) used."""

    shape: str
    flows: int
    ops: Sequence[Op]
    cpu_s: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.flows < 1:
            raise ValueError(f"shape {self.shape!r}: a run needs at least one flow")


@dataclass(frozen=True)
class Usage:
    """One resource's use by one flow of a shape: ``per_flow`` units per flow (times R: the load),
    or, for a ``constant`` resource, the load itself whatever R is."""

    key: str
    group: str
    limit: Limit
    limit_value: float
    per_flow: float = 0.0
    constant: float = 0.0
    detail: str = ""


@dataclass(frozen=True)
class Row:
    """One resource at rate R."""

    usage: Usage
    rate: float

    @property
    def load(self) -> float:
        return self.usage.per_flow * self.rate + self.usage.constant

    @property
    def share(self) -> float:
        """Load as a fraction of the limit."""
        return self.load / self.usage.limit_value if self.usage.limit_value else math.inf

    @property
    def scales(self) -> bool:
        """Whether the load grows with R (a flow's own document does not)."""
        return self.usage.per_flow > 0

    @property
    def ceiling(self) -> float:
        """The R at which the load reaches the limit (inf: never; 0: already at any R)."""
        u = self.usage
        if u.per_flow <= 0:
            return math.inf if u.constant <= u.limit_value else 0.0
        return max(0.0, (u.limit_value - u.constant) / u.per_flow)


Mix = Mapping[str, float]


def parse_mix(text: str) -> dict[str, float]:
    """``reference=3,dag=1`` (or ``reference``) as shape -> share, the shares summing to 1."""
    weights: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, _, weight = part.partition("=")
        try:
            value = float(weight) if weight else 1.0
        except ValueError:
            raise ValueError(f"--mix: {part!r} is not SHAPE=WEIGHT") from None
        if value < 0 or not math.isfinite(value):
            raise ValueError(f"--mix: weight of {name!r} must be >= 0")
        weights[name.strip()] = value
    total = sum(weights.values())
    if total <= 0:
        raise ValueError(f"--mix {text!r}: no shape has a weight")
    return {k: v / total for k, v in weights.items() if v > 0}


def _writes(ops: Iterable[Op]) -> list[Op]:
    return list(of_kind(ops, FS_WRITE))


def _fields(op: Op) -> set[str]:
    return set(op.get("fields", ()))


def _stamps(op: Op) -> set[str]:
    """The fields ``op`` writes that move forward: timestamps, and ids callers number."""
    return set(op.get("ts", ())) | (_fields(op) & rules.CALLER_ORDERED)


def index_usage(run: ShapeRun, deployment: Deployment) -> list[Usage]:
    """Writes per flow to each index range a monotonic field puts all new entries at the end of:
    its single-field index (unless exempted) and each composite index that holds it (divided by
    the shards when ``shard`` leads it and the field's single-field index is exempted)."""
    writes = _writes(run.ops)
    monotonic = rules.monotonic_fields(deployment.collections)
    for op in writes:  # and whatever the run saw holding a timestamp
        monotonic.setdefault(op.get("coll"), set()).update(_stamps(op))
    indexes, usages = deployment.indexes, []
    for collection, paths in sorted(monotonic.items()):
        mine = [op for op in writes if op.get("coll") == collection]
        for path in sorted(paths):
            if indexes.single_field_indexed(collection, path):
                n = sum(1 for op in mine if path in _stamps(op))
                if n:
                    usages.append(_index(f"{collection}.{path} single-field index", n, run, 1))
            for composite in indexes.composites_of(collection, path):
                n = _composite_writes(mine, path, set(composite.fields))
                sharded = composite.shard_first and not indexes.single_field_indexed(
                    collection, path
                )
                shards = (deployment.firestore_shards or 1) if sharded else 1
                if n:
                    name = f"{collection}.{path} in {composite.name}"
                    usages.append(_index(name, n, run, shards))
    return usages


def _composite_writes(writes: Sequence[Op], path: str, fields: set[str]) -> int:
    """Writes that (re)insert an entry of a composite index holding ``path``: they write one of
    its fields, and the document holds a timestamp in ``path`` (written now or before)."""
    stamped: set[str] = set()
    count = 0
    for op in sorted(writes, key=lambda o: o.t):
        if path in _stamps(op):
            stamped.add(op.get("id"))
        if op.get("id") in stamped and _fields(op) & fields:
            count += 1
    return count


def _index(name: str, writes: int, run: ShapeRun, shards: int) -> Usage:
    limit = limits.FIRESTORE_SEQUENTIAL_INDEX
    detail = f"{writes / run.flows:.2f} writes/flow" + (f", {shards} shards" if shards > 1 else "")
    return Usage(
        f"firestore index: {name}",
        "firestore",
        limit,
        limit.value * shards,
        per_flow=writes / run.flows,
        detail=detail,
    )


def key_range_usage(run: ShapeRun) -> list[Usage]:
    """Per collection whose documents the run created: are the ids created in key order? If
    so every write of the collection lands on the newest key range; if not, on one of many."""
    writes = _writes(run.ops)
    usages = []
    for collection in sorted({op.get("coll") for op in writes}):
        mine = [op for op in writes if op.get("coll") == collection]
        created = [
            op.get("id") for op in sorted(mine, key=lambda o: o.t) if op.get("kind") == "create"
        ]
        if len(created) < 3:
            continue
        rho = rules.key_order(created)
        ordered = abs(rho) >= rules.KEY_ORDER_THRESHOLD
        share = 1.0 if ordered else 1.0 / SPREAD_RANGES
        limit = limits.FIRESTORE_KEY_RANGE
        usages.append(
            Usage(
                f"firestore key range: {collection}",
                "firestore",
                limit,
                limit.value,
                per_flow=len(mine) / run.flows * share,
                detail=f"ids rank corr {rho:+.2f}: "
                + ("in key order, one range" if ordered else f"spread, 1/{SPREAD_RANGES} each"),
            )
        )
    return usages


def sustained_rate(times: Sequence[float]) -> float:
    """A document's sustained write rate: the most writes in any ``SUSTAINED_S`` window, over
    the window (the limit is on sustained writes; a step's claim and commit a few milliseconds
    apart are one burst, not a rate of hundreds a second)."""
    most, start = 0, 0
    for end, t in enumerate(times):
        while t - times[start] >= SUSTAINED_S:
            start += 1
        most = max(most, end - start + 1)
    return most / SUSTAINED_S


def document_usage(run: ShapeRun, deployment: Deployment) -> list[Usage]:
    """Writes per second to one document: a flow's own (its writes over its life, the slowest
    tenth of flows: independent of R) and the hottest shared one (breaker windows, tenant
    slots and states: written by every flow, so at a rate that grows with R)."""
    writes = _writes(run.ops)
    per_flow = deployment.per_flow_collections
    limit = limits.FIRESTORE_DOCUMENT
    by_doc: dict[tuple[str, str], list[Op]] = defaultdict(list)
    for op in writes:
        by_doc[(op.get("coll"), op.get("id"))].append(op)
    own = sorted(
        sustained_rate(sorted(o.t for o in ops))
        for (coll, _), ops in by_doc.items()
        if coll in per_flow and len(ops) > 1
    )
    usages = []
    if own:
        p95 = own[min(len(own) - 1, int(0.95 * len(own)))]
        detail = (
            f"busiest {SUSTAINED_S:g} s of its life: median {own[len(own) // 2]:.2f}/s, "
            f"p95 {p95:.2f}/s"
        )
        usages.append(
            Usage(
                "firestore document: a flow's own",
                "firestore",
                limit,
                limit.value,
                constant=p95,
                detail=detail,
            )
        )
    timed = deployment.collection("breaker_windows")
    shared = Counter(
        {k: len(v) for k, v in by_doc.items() if k[0] not in per_flow and k[0] != timed}
    )
    if shared:
        (coll, doc), n = shared.most_common(1)[0]
        usages.append(
            Usage(
                "firestore document: hottest shared",
                "firestore",
                limit,
                limit.value,
                per_flow=n / run.flows,
                detail=f"{coll}/{doc}: {n / run.flows:.3f} writes/flow",
            )
        )
    return usages


def instances_per_flow(run: ShapeRun, deployment: Deployment, services: Iterable[str]) -> float:
    """Cloud Run instances per flow/s of ``services`` at 70 % CPU (the sizing's rule)."""
    total = 0.0
    for name in services:
        service = deployment.service(name)
        if service is not None and service.cpu > 0:
            cpu = run.cpu_s.get(name, 0.0) / run.flows
            total += cpu / (service.cpu * limits.TARGET_SHARE)
    return total


def breaker_window_usage(run: ShapeRun, deployment: Deployment) -> list[Usage]:
    """Writes per second to one breaker window document. Its writers pace their flushes to keep
    it near a constant rate whatever their number (relayflow.core.breakers): a constant load,
    independent of R, until a shard has more writers than the longest interval allows (every
    worker and poller instance calling the dependency, over ``breaker_shards``), past which it
    grows as writers / ``breaker_max_flush_s``. The load is the larger of the two; it is
    charged as their sum, the stricter reading. Limit: Firestore's ~1 write/s per document."""
    windows = deployment.collection("breaker_windows")
    if not any(op.get("coll") == windows for op in of_kind(run.ops, FS_WRITE)):
        return []
    shards, longest_s = deployment.breaker_shards, deployment.breaker_max_flush_s
    paced = deployment.breaker_writes_per_s
    per_flow = instances_per_flow(run, deployment, SERVICE_QUEUES) / shards / longest_s
    limit = limits.FIRESTORE_DOCUMENT
    writers = paced * longest_s
    return [
        Usage(
            f"firestore document: breaker window (per shard of {shards})",
            "firestore",
            limit,
            limit.value,
            per_flow=per_flow,
            constant=paced,
            detail=f"paced flushes: ~{paced:g}/s per document up to {writers:,.0f} instances a "
            f"shard (flush every {deployment.breaker_flush_s:g}-{longest_s:,.0f} s)",
        )
    ]


def queue_usage(run: ShapeRun, deployment: Deployment) -> list[Usage]:
    """Dispatches per second per queue shard of each kind (every created task is dispatched),
    against the configured rate (at most Cloud Tasks' 500/s); CreateTask calls against the API
    quota."""
    creates = list(of_kind(run.ops, TASK_CREATE))
    usages = []
    for kind in deployment.queues:
        mine = [
            op for op in creates if op.get("outcome") == "created" and kind.holds(op.get("queue"))
        ]
        if not mine:
            continue
        limit = limits.TASKS_QUEUE_DISPATCH
        rate = min(kind.max_dispatches_per_second, limit.value)
        per_queue = Counter(op.get("queue") for op in mine)
        usages.append(
            Usage(
                f"cloud tasks dispatches: {kind.kind} (per shard of {kind.shards})",
                "tasks",
                limit,
                rate,
                per_flow=len(mine) / run.flows / kind.shards,
                detail=f"{len(mine) / run.flows:.2f} tasks/flow; configured {rate:g}/s; "
                f"{len(per_queue)} queues used",
            )
        )
    if creates:
        usages.append(
            Usage(
                "cloud tasks API requests",
                "tasks",
                limits.TASKS_API,
                limits.TASKS_API.value,
                per_flow=len(creates) / run.flows,
                detail=f"{len(creates) / run.flows:.2f} CreateTask/flow",
            )
        )
    return usages


def publish_usage(run: ShapeRun) -> list[Usage]:
    """Pub/Sub publisher throughput: each message at least 1 kB (the quota's unit)."""
    kb = sum(max(1.0, float(op.get("bytes", 0)) / 1000.0) for op in of_kind(run.ops, PUBLISH))
    count = sum(1 for _ in of_kind(run.ops, PUBLISH))
    if not count:
        return []
    limit = limits.PUBSUB_PUBLISH
    return [
        Usage(
            "pub/sub publisher throughput",
            "pubsub",
            limit,
            limit.value,
            per_flow=kb / run.flows,
            detail=f"{count / run.flows:.2f} messages/flow",
        )
    ]


def requests_of(run: ShapeRun, deployment: Deployment) -> dict[str, float]:
    """Cloud Run requests per flow by service: a push per start message, a dispatch per task."""
    created = [op for op in of_kind(run.ops, TASK_CREATE) if op.get("outcome") == "created"]
    result = {START_SERVICE: 1.0}
    for service, kinds in SERVICE_QUEUES.items():
        queues = [q for q in deployment.queues if q.kind in kinds]
        n = sum(1 for op in created if any(q.holds(op.get("queue")) for q in queues))
        result[service] = n / run.flows
    return result


def cloud_run_usage(run: ShapeRun, deployment: Deployment) -> list[Usage]:
    """vCPUs each service needs (CPU per flow x R) against its max instances x vCPU (at most
    the default 100 instances), and all of them against the regional vCPU quota; requests in
    flight (WALL_PER_CPU x vCPUs) against max instances x concurrency."""
    usages, total = [], 0.0
    requests = requests_of(run, deployment)
    for service in deployment.services:
        cpu = run.cpu_s.get(service.name, 0.0)
        if cpu <= 0:
            continue
        per_flow = cpu / run.flows
        total += per_flow
        instances = min(service.max_instances, limits.CLOUD_RUN_MAX_INSTANCES.value)
        per_request = cpu / max(requests.get(service.name, 0.0) * run.flows, 1.0) * 1000
        usages.append(
            Usage(
                f"cloud run vCPU: {service.name}",
                "cloud run",
                limits.CLOUD_RUN_MAX_INSTANCES,
                instances * service.cpu,
                per_flow=per_flow,
                detail=f"{per_flow * 1000:.1f} ms CPU/flow, {per_request:.1f} ms/request; "
                f"{instances:g} x {service.cpu:g} vCPU",
            )
        )
        concurrency = min(service.concurrency, limits.CLOUD_RUN_CONCURRENCY.value)
        usages.append(
            Usage(
                f"cloud run requests in flight: {service.name}",
                "cloud run",
                limits.CLOUD_RUN_CONCURRENCY,
                instances * concurrency,
                per_flow=per_flow * WALL_PER_CPU,
                detail=f"{requests.get(service.name, 0.0):.2f} requests/flow; "
                f"{instances:g} x concurrency {concurrency:g}",
            )
        )
    if total:
        limit = limits.CLOUD_RUN_REGION_VCPU
        usages.append(
            Usage(
                "cloud run vCPU: region, all services",
                "cloud run",
                limit,
                limit.value,
                per_flow=total,
                detail=f"{total * 1000:.1f} ms CPU/flow",
            )
        )
    return usages


def usages_of(run: ShapeRun, deployment: Deployment) -> list[Usage]:
    return [
        *index_usage(run, deployment),
        *key_range_usage(run),
        *document_usage(run, deployment),
        *breaker_window_usage(run, deployment),
        *queue_usage(run, deployment),
        *publish_usage(run),
        *cloud_run_usage(run, deployment),
    ]


def mixed(runs: Mapping[str, ShapeRun], mix: Mix, deployment: Deployment) -> list[Usage]:
    """Each resource's use per flow of the mix: per-flow figures weighted by the mix; constant
    ones the largest of the shapes in it (a flow's own document is as hot as its shape makes it)."""
    missing = sorted(set(mix) - set(runs))
    if missing:
        raise ValueError(f"no run of shape(s) {', '.join(missing)} to weigh")
    combined: dict[str, Usage] = {}
    for shape, weight in mix.items():
        for u in usages_of(runs[shape], deployment):
            seen = combined.get(u.key)
            if seen is None:
                combined[u.key] = Usage(
                    u.key,
                    u.group,
                    u.limit,
                    u.limit_value,
                    u.per_flow * weight,
                    u.constant,
                    u.detail,
                )
            else:
                combined[u.key] = Usage(
                    u.key,
                    u.group,
                    u.limit,
                    min(u.limit_value, seen.limit_value),
                    seen.per_flow + u.per_flow * weight,
                    max(seen.constant, u.constant),
                    seen.detail,
                )
    return list(combined.values())


@dataclass(frozen=True)
class Sizing:
    """What a service needs at R: vCPUs, instances at 70 % CPU, threads and concurrency."""

    service: str
    vcpu: float
    instances: int
    threads: int
    concurrency: int
    requests_per_s: float


def sizing(
    runs: Mapping[str, ShapeRun], mix: Mix, deployment: Deployment, rate: float
) -> list[Sizing]:
    """Cloud Run sizing at ``rate`` flows/s: instances = vCPUs / (vCPU per instance x 70 %);
    threads = the requests one instance's vCPUs keep in flight (WALL_PER_CPU per vCPU), and
    the concurrency equal to them, so Cloud Run never queues a request behind busy threads."""
    result = []
    for service in deployment.services:
        cpu = sum(w * runs[s].cpu_s.get(service.name, 0.0) / runs[s].flows for s, w in mix.items())
        if cpu <= 0:
            continue
        requests = sum(
            w * requests_of(runs[s], deployment).get(service.name, 0.0) for s, w in mix.items()
        )
        vcpu = cpu * rate
        threads = max(1, math.ceil(WALL_PER_CPU * service.cpu))
        result.append(
            Sizing(
                service.name,
                vcpu,
                math.ceil(vcpu / (service.cpu * limits.TARGET_SHARE)),
                threads,
                min(threads, int(limits.CLOUD_RUN_CONCURRENCY.value)),
                requests * rate,
            )
        )
    return result


def firestore_ops_per_flow(runs: Mapping[str, ShapeRun], mix: Mix) -> float:
    """Firestore writes and document reads per flow of the mix (what the ramp rule counts)."""
    total = 0.0
    for shape, weight in mix.items():
        run = runs[shape]
        writes = sum(1 for _ in of_kind(run.ops, FS_WRITE))
        reads = sum(max(1, int(op.get("n", 1))) for op in of_kind(run.ops, FS_READ))
        total += weight * (writes + reads) / run.flows
    return total


def ramp_minutes(ops_per_s: float) -> float:
    """Minutes the 500/50/5 rule takes from 500 operations/s to ``ops_per_s``."""
    start = limits.FIRESTORE_RAMP.value
    if ops_per_s <= start:
        return 0.0
    return 5.0 * math.ceil(math.log(ops_per_s / start) / math.log(1.5))

"""The composition root: real clients, store, queue and engine, built from Settings once; the
token verifiers and the dead-letter hold the services are handed. Only this module (and the
entry points) put ``relayflow.gcp`` together with the engine and the web surfaces."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field

from opentelemetry.trace import Tracer
from pydantic import ValidationError

from relayflow.app import AppError, load_registry
from relayflow.core.breakers import Breakers
from relayflow.core.bulk_runner import BulkRunner
from relayflow.core.bulk_state import BulkQueue, BulkStore
from relayflow.core.clock import Clock, SystemClock
from relayflow.core.engine import Engine, Limits
from relayflow.core.errors import ConfigError
from relayflow.core.flows import Registry
from relayflow.core.messages import describe
from relayflow.core.metrics import Metrics
from relayflow.core.payloads import Offload
from relayflow.core.planner import QueueNames
from relayflow.core.schedule_state import ScheduleStates
from relayflow.core.scheduler import Scheduler
from relayflow.core.sealing import Sealing
from relayflow.gcp import blobs, events, queue, recording, store
from relayflow.gcp.auth import TokenVerifier
from relayflow.gcp.breakers import FirestoreBreakers
from relayflow.gcp.bulk_actions import FirestoreBulkActions
from relayflow.gcp.dead_letters import DeadLetterHold
from relayflow.gcp.schedule_states import FirestoreScheduleStates
from relayflow.gcp.sealer import sealer_from_settings
from relayflow.metrics import configure_metrics
from relayflow.settings import Settings, load_settings
from relayflow.telemetry import Counters, configure_logging, configure_tracing
from relayflow.topology import (
    Topology,
    load_topology,
    topic_of_subscription,
    with_queue_shards,
)

STEP_PATH = "/tasks/step"
# Where a bulk action's batch tasks go (the worker serves them).
BULK_PATH = "/tasks/bulk"
# What a handler leaves of its queue's dispatch deadline for reading and committing.
COMMIT_MARGIN_S = 20.0
POLL_PATH = "/tasks/poll"


def base_url(url: object) -> str:
    """A service URL without its trailing slash: the OIDC audience for that service."""
    return str(url).rstrip("/")


@dataclass(frozen=True)
class Runtime:
    """Everything an entry point needs, wired."""

    settings: Settings
    topology: Topology
    engine: Engine
    store: store.FlowStore
    counters: Counters
    tracer: Tracer | None = None  # None: tracing is off
    metrics: Metrics = field(default_factory=Metrics)  # the base class: metrics are off
    registry: Registry | None = None  # the flows this deployment runs
    clock: Clock = field(default_factory=SystemClock)  # the engine's
    # Schedules' documents (None: Firestore's ``schedules`` collection, over the store's client).
    schedule_states: ScheduleStates | None = None
    # The flows' sensitive fields: sealed by the engine's codec as they enter a flow, opened
    # for its handlers and, in the api, for the callers who may read them (None: built
    # without: no key).
    sealing: Sealing | None = None
    # Bulk actions' documents (None: Firestore's ``bulk_actions``, over the store's client) and
    # where their batch tasks go (None: no bulk action can run here).
    bulk_store: BulkStore | None = None
    bulk_queue: BulkQueue | None = None

    def dead_letter_hold(self) -> DeadLetterHold:
        """The dead-letter hold the api browses and replays from (a Pub/Sub subscriber, and a
        publisher for replays): built only by the service that serves it."""
        topology, settings = self.topology, self.settings
        return DeadLetterHold(
            events.subscriber(),
            project=settings.project_id,
            subscription=topology.subscriptions.dead_letter.name,
            events=events.Events(
                events.build_publisher(), project=settings.project_id, counters=self.counters
            ),
            requests_topic=topology.topics.requests,
            origins=functools.partial(topic_of_subscription, topology),
            signals_topic=topology.topics.signals,
        )

    def scheduler(self) -> Scheduler:
        """The app's schedules over their Firestore documents (``schedules/{name}``) and the
        engine: what the tick route, the local scheduler, the api and the CLI work with."""
        states = self.schedule_states or FirestoreScheduleStates(
            self.store.client, counters=self.counters
        )
        schedules = self.registry.schedules if self.registry is not None else ()
        return Scheduler(self.engine, states, schedules, self.clock)

    def bulk_runner(self) -> BulkRunner:
        """Bulk actions over their Firestore documents (``bulk_actions/{id}``), the flows'
        listing and the engine; their batches enqueued on the bulk queue: what the api's and
        the console's bulk routes, the worker's ``/tasks/bulk`` and the sweeper work with."""
        names = self.topology.firestore
        store = self.bulk_store or FirestoreBulkActions(
            self.store.client,
            collection=names.bulk_actions_collection,
            rows=names.bulk_rows_collection,
            counters=self.counters,
        )
        if self.bulk_queue is None:
            raise ConfigError("this runtime has no queue for bulk actions' batches")
        return BulkRunner(
            self.engine,
            store,
            self.store,
            self.bulk_queue,
            self.clock,
            retention_s=self.settings.retention_days * 24 * 3600.0,
        )


def bulk_target(settings: Settings, topology: Topology) -> queue.BulkTarget:
    """Bulk actions' batches: on the steps queue's first shard, to the worker's batch route
    (a few tasks a minute: no queue of their own to provision or to count against the
    project's queue quota)."""
    steps = topology.queues.steps
    worker = base_url(settings.worker_url)
    target = queue.Target(worker + BULK_PATH, worker, steps.dispatch_deadline_s)
    return queue.BulkTarget(steps.name, target)


def task_targets(settings: Settings, topology: Topology) -> dict[str, queue.Target]:
    """Where each queue's tasks go, on every shard: steps to the worker, polls to the poller."""
    queues = topology.queues
    worker, poller = base_url(settings.worker_url), base_url(settings.poller_url)
    targets = {}
    for steps in (queues.steps, queues.steps_high):
        for shard in steps.shard_queues() if steps is not None else ():
            targets[shard.name] = queue.Target(
                worker + STEP_PATH, worker, shard.dispatch_deadline_s
            )
    for polls in (queues.polls, queues.polls_high):
        for shard in polls.shard_queues() if polls is not None else ():
            targets[shard.name] = queue.Target(
                poller + POLL_PATH, poller, shard.dispatch_deadline_s
            )
    return targets


def queue_names(topology: Topology) -> QueueNames:
    """The engine's queue of each kind of task, and priority, and the shards of each."""
    queues = topology.queues
    return QueueNames(
        steps=queues.steps.name,
        polls=queues.polls.name,
        steps_high=queues.steps_high.name if queues.steps_high else None,
        polls_high=queues.polls_high.name if queues.polls_high else None,
        shards=queues.shards,
    )


def deployed_topology(settings: Settings) -> Topology:
    """The packaged topology with this environment's queue shards (RELAYFLOW_QUEUE_SHARDS)."""
    return with_queue_shards(load_topology(), settings.queue_shards)


def build_runtime(
    settings: Settings,
    *,
    tracer: Tracer | None = None,
    metrics: Metrics | None = None,
    component: str = "relayflow",
) -> Runtime:
    """Connect to Firestore, Cloud Tasks and Pub/Sub (or their emulators) and build the engine.

    ``tracer`` is what ``telemetry.configure_tracing`` returned (None: tracing off);
    ``metrics`` what ``metrics.configure_metrics`` did (None: metrics off). With
    ``RELAYFLOW_OPS_LOG`` set, every client records its operations as ``component``
    (``relayflow.gcp.recording``).
    """
    metrics = metrics or Metrics()
    registry = load_registry(settings.app, settings)  # first: a bad app fails before any client
    topology = deployed_topology(settings)
    sealing = build_sealing(settings, registry)
    counters = Counters()
    clock = SystemClock()
    recorder = recording.from_env(component)
    flow_store = store.FlowStore(
        recording.firestore(store.build_client(settings), recorder),
        flows=topology.firestore.flows_collection,
        rejected=topology.firestore.rejected_collection,
        lanes=topology.firestore.lanes_collection,
        slots=topology.firestore.tenant_slots_collection,
        tenants=topology.firestore.tenants_collection,
        counters=counters,
        shards=settings.firestore_shards,
    )
    task_queue = queue.TaskQueue(
        recording.tasks(queue.build_client(settings), recorder),
        project=settings.project_id,
        location=settings.location,
        targets=task_targets(settings, topology),
        service_account=settings.tasks_service_account,
        counters=counters,
        bulk=bulk_target(settings, topology),
    )
    publisher = events.Events(
        recording.publisher(events.build_publisher(), recorder),
        project=settings.project_id,
        results_topic=topology.topics.results,
        counters=counters,
    )
    breakers = Breakers(
        FirestoreBreakers(
            flow_store.client,
            breakers=topology.firestore.breakers_collection,
            windows=topology.firestore.breaker_windows_collection,
            counters=counters,
        ),
        settings.dependencies,
        clock,
        shards=settings.breaker_shards,
        metrics=metrics,
    )
    engine = Engine(
        registry=registry,
        store=flow_store,
        queue=task_queue,
        events=publisher,
        clock=clock,
        queues=queue_names(topology),
        limits=limits(settings, topology),
        tenants=settings.tenants,
        breakers=breakers,
        tracer=tracer,
        metrics=metrics,
        offload=offload(settings, counters),
        sealing=sealing,
    )
    return Runtime(
        settings,
        topology,
        engine,
        flow_store,
        counters,
        tracer,
        metrics,
        registry,
        clock,
        sealing=sealing,
        bulk_queue=task_queue,
    )


def offload(settings: Settings, counters: Counters | None = None) -> Offload | None:
    """Where values too large for a flow document go: the bucket RELAYFLOW_OFFLOAD_BUCKET
    names (None: none is set, and values stay inline)."""
    if settings.offload_bucket is None:
        return None
    project = settings.project_id
    bucket = blobs.GcsBlobs(settings.offload_bucket, project=project, counters=counters)
    return Offload(bucket, threshold_bytes=settings.offload_threshold_bytes)


def build_sealing(settings: Settings, registry: Registry) -> Sealing:
    """What seals and opens the flows' sensitive fields, with the settings' keyset;
    ConfigError if a flow marks fields and there is none (nothing is stored in clear)."""
    sealing = Sealing(registry, sealer_from_settings(settings))
    marking = sealing.marking()
    if marking and sealing.sealer is None:
        raise ConfigError(
            f"flows {', '.join(marking)} mark sensitive fields: set RELAYFLOW_SENSITIVE_KEYSET "
            "(a Tink keyset, encrypted by RELAYFLOW_SENSITIVE_KEY_URI in the cloud) or "
            "RELAYFLOW_SENSITIVE_KEYSET_FILE (README, 'Sensitive data')"
        )
    return sealing


def limits(settings: Settings, topology: Topology) -> Limits:
    """The engine's bounds, from settings and the queues' dispatch deadlines: a claim outlives
    the longest a step may run; a handler's budget leaves its commit time before the deadline."""
    steps, polls = topology.queues.steps, topology.queues.polls
    budget = settings.handler_budget_s
    lease_s = settings.claim_lease_s or steps.dispatch_deadline_s + 30.0
    return Limits(
        history_limit=settings.history_limit,
        retention_s=settings.retention_days * 24 * 3600.0,
        claim_lease_s=lease_s,
        # A first dispatch this late still runs under the create's claim (30 s of 150 s): a
        # shorter lease (the e2e tests') keeps a redelivery's wait as short.
        first_delivery_within_s=lease_s / 5,
        action_budget_s=budget or steps.dispatch_deadline_s - COMMIT_MARGIN_S,
        poll_budget_s=budget or polls.dispatch_deadline_s - COMMIT_MARGIN_S,
        unknown_flow_grace_s=settings.unknown_flow_grace_s,
        continue_inline=settings.continue_inline,
        undo_window_s=settings.undo_window_s,
        undo_initial_s=settings.undo_initial_s,
        undo_max_interval_s=settings.undo_max_interval_s,
        poll_chain=settings.poll_chain,
    )


def boot(service: str) -> Runtime:
    """Build an entry point's runtime from the environment, or stop the process saying why.

    A bad setting or a ``RELAYFLOW_APP`` that cannot be loaded is logged as one CRITICAL line
    naming the problem, then raised: gunicorn, functions-framework and the CLI all stop on it
    rather than serve a deployment that cannot run its flows.
    """
    try:
        settings = load_settings()
    except ValidationError as exc:
        raise ConfigError(f"{service}: bad configuration: {describe(exc)}") from None
    configure_logging(project_id=settings.project_id)
    try:
        return build_runtime(
            settings,
            tracer=configure_tracing(settings, service=service),
            metrics=configure_metrics(settings, service=service),
            component=service,
        )
    except AppError as exc:
        logging.getLogger("relayflow.boot").critical(
            "cannot load the app", extra={"service": service, "reason": str(exc)}
        )
        raise
    except ConfigError as exc:  # e.g. flows mark sensitive fields and no keyset is set
        logging.getLogger("relayflow.boot").critical(
            "bad configuration", extra={"service": service, "reason": str(exc)}
        )
        raise


def task_verifier(
    settings: Settings, own_url: object, *, sweep: bool = False
) -> TokenVerifier | None:
    """The verifier for a task-receiving service, or None when verification is off.

    Task routes admit only the account Cloud Tasks signs as; ``sweep=True`` also admits
    Cloud Scheduler's accounts, which may trigger a sweep but never post a task.
    """
    if not settings.verify_tokens:
        return None
    callers = {settings.tasks_service_account}
    if sweep:
        callers |= set(settings.scheduler_service_accounts)
    return TokenVerifier(
        audience=base_url(own_url),
        allowed_emails=callers,
        certs_url=str(settings.oidc_certs_url) if settings.oidc_certs_url else None,
    )


def api_verifier(settings: Settings) -> TokenVerifier | None:
    """The api's verifier, or None when it verifies no tokens (the local stack).

    It admits the callers on the api's allowlists (viewers, operators, completers); tokens
    minted for the api's URL, or for one of ``api_audiences`` while they are young.
    """
    if not settings.api_verify_tokens:
        return None
    allowed = {*settings.api_viewers, *settings.api_operators, *settings.api_completers}
    allowed |= set(settings.api_signallers)
    audience = base_url(settings.api_url)
    return TokenVerifier(
        audience=[audience, *settings.api_audiences],
        allowed_emails=allowed,
        certs_url=str(settings.oidc_certs_url) if settings.oidc_certs_url else None,
        audience_max_age_s={a: settings.api_audience_max_age_s for a in settings.api_audiences},
    )

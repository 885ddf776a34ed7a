"""Typed settings, read once from the environment at each entry point and passed down."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, HttpUrl, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from relayflow.core.breaker_policy import Dependencies
from relayflow.core.payloads import (
    DEFAULT_THRESHOLD_BYTES,
    MAX_THRESHOLD_BYTES,
    MIN_THRESHOLD_BYTES,
)
from relayflow.core.position import MAX_POLL_CHAIN, POLL_CHAIN
from relayflow.core.queue_shards import MAX_QUEUE_SHARDS
from relayflow.core.tenants import TENANT_PATTERN, Tenants
from relayflow.topology import load_topology

# The reference app, run when RELAYFLOW_APP is not set.
DEFAULT_APP = "relayflow.apps.registration:build_registry"


class Settings(BaseSettings):
    """Everything a relayflow process needs to know about where it runs.

    Each field reads ``RELAYFLOW_<FIELD>``; the emulator hosts read Google's own variable names
    so the official client libraries and ours agree on where the emulators are.
    """

    model_config = SettingsConfigDict(env_prefix="RELAYFLOW_", extra="ignore", frozen=True)

    project_id: str = Field(
        default="relayflow-local",
        validation_alias=AliasChoices("RELAYFLOW_PROJECT_ID", "GOOGLE_CLOUD_PROJECT"),
        pattern=r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$",
    )
    location: str = Field(default="us-central1", pattern=r"^[a-z]+-[a-z]+[0-9]+$")
    # The flows this deployment runs, as ``package.module:attribute`` (see relayflow.app).
    app: str = Field(default=DEFAULT_APP, min_length=1)

    pubsub_emulator_host: str | None = Field(default=None, validation_alias="PUBSUB_EMULATOR_HOST")
    firestore_emulator_host: str | None = Field(
        default=None, validation_alias="FIRESTORE_EMULATOR_HOST"
    )
    cloud_tasks_emulator_host: str | None = Field(
        default=None, validation_alias="CLOUD_TASKS_EMULATOR_HOST"
    )

    # Where Cloud Tasks delivers: the worker and poller services' base URLs.
    worker_url: HttpUrl = HttpUrl("http://127.0.0.1:8127")
    poller_url: HttpUrl = HttpUrl("http://127.0.0.1:8128")
    # The external API the reference flow talks to (the fake one locally).
    client_api_url: HttpUrl = HttpUrl("http://127.0.0.1:8125")
    client_api_timeout_s: float = Field(default=10.0, gt=0, le=300)

    # OIDC: tasks carry a token for this service account; worker and poller verify it.
    tasks_service_account: str = "relayflow-tasks@relayflow-local.iam.gserviceaccount.com"
    verify_tokens: bool = True
    # Callers of POST /sweep besides the tasks account (Cloud Scheduler's), as a JSON list.
    scheduler_service_accounts: tuple[str, ...] = ()
    # None means Google's certs; locally, the Cloud Tasks emulator's.
    oidc_certs_url: HttpUrl | None = None

    # The reference flow's policies (DESIGN invariant 2 defaults: 15 min deadline, ±20% jitter).
    poll_initial_s: float = Field(default=1.0, gt=0)
    poll_multiplier: float = Field(default=2.0, ge=1)
    poll_max_interval_s: float = Field(default=30.0, gt=0)
    poll_jitter: float = Field(default=0.2, ge=0, lt=1)
    poll_max_polls: int = Field(default=50, ge=1)
    poll_deadline_s: float = Field(default=900.0, gt=0)
    retry_max_attempts: int = Field(default=5, ge=1)
    retry_initial_s: float = Field(default=1.0, gt=0)
    retry_max_interval_s: float = Field(default=60.0, gt=0)

    # How many polls a poll chain runs between two writes of its flow's document (1: every
    # poll writes; ``core.planner.chain``). Every component reads the same value: the api and
    # the sweeper look for a chain's tasks that far.
    poll_chain: int = POLL_CHAIN
    history_limit: int = Field(default=200, ge=10, le=2000)
    # Finished flows and rejected messages are deleted this long after they end (TTL).
    retention_days: float = Field(default=30.0, gt=0, le=3650)
    # A non-terminal flow whose next run is this late is re-enqueued by the sweeper.
    sweep_grace_s: float = Field(default=120.0, gt=0)
    # A task of a flow type no deployed version runs is answered 5xx this long after it was
    # due (a rolling deploy); then the flow ends FAILED (UNKNOWN_FLOW).
    unknown_flow_grace_s: float = Field(default=900.0, ge=0)
    # A step's claim lease and a handler's time budget default to what the queues' dispatch
    # deadlines allow (topology.json); set both lower to recover faster from crashed workers
    # on a stack whose handlers are known to be quick (the chaos bench does).
    claim_lease_s: float | None = Field(default=None, gt=0)
    handler_budget_s: float | None = Field(default=None, gt=0)
    # A claimed step due the moment the step before it commits (an action after a poll that
    # found its operation ready, say) runs in the same request, its claim taken in that
    # commit: one write, one task and one request fewer. False: every step is its own task.
    continue_inline: bool = True
    # An undo that cannot be done now (its dependency is down, its retries are spent) does
    # not hold a failed flow's end back: the flow ends, and the undo goes on as its clean-up,
    # on a backoff that grows to ``undo_max_interval_s``, for this long after the end; then
    # it is abandoned (an alert). 0: such an undo is recorded as failed at once. Cloud Tasks
    # schedules at most 30 days ahead, so the window stays under that.
    undo_window_s: float = Field(default=24 * 3600.0, ge=0, le=29 * 24 * 3600.0)
    undo_initial_s: float = Field(default=30.0, ge=0.1, le=3600.0)
    undo_max_interval_s: float = Field(default=3600.0, ge=1, le=24 * 3600.0)

    # The operator api: its own URL is the audience of the ID tokens its callers send
    # (``api_audiences`` adds others, e.g. the OAuth client of a proxy that mints them).
    api_url: HttpUrl = HttpUrl("http://127.0.0.1:8129")
    api_audiences: tuple[str, ...] = ()
    # A token for one of ``api_audiences`` (not minted for this api alone: gcloud's own ID
    # tokens, say, which any service the person sent one to could replay) is admitted only
    # this young.
    api_audience_max_age_s: float = Field(default=300.0, ge=30, le=3600)
    # False only on a machine's loopback (the local stack): the api is then open to requests
    # from 127.0.0.1, which act as "local" with the operator role.
    api_verify_tokens: bool = True
    # Who may read flows (viewers) and also cancel, retry and replay them (operators): the
    # verified emails of callers, as JSON lists.
    api_viewers: tuple[str, ...] = ()
    api_operators: tuple[str, ...] = ()
    # Who may only complete callback tokens (POST /callbacks, the flow-signals push to
    # /signals): the external systems callback steps wait on and the Pub/Sub push account.
    # Operators may complete tokens too; viewers may not (it is a write).
    api_completers: tuple[str, ...] = ()
    # Who may send signals to flows (POST /flows/{id}/signals/{name}, the console's approve
    # and reject buttons): a signaller only, or, on a viewer's or an operator's list too, in
    # addition to what that role does. Operators may signal anyway.
    api_signallers: tuple[str, ...] = ()
    # Callers who see only some tenants' flows, as JSON: {"alice@acme.com": ["acme"]}.
    api_scopes: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    # Viewers and operators who see flows' sensitive fields in clear in the api, the console
    # and the CLI (every read logged); everyone else sees "[redacted]". "local": the local
    # stack's caller.
    api_sensitive_readers: tuple[str, ...] = ()

    # Flows' sensitive fields (relayflow.core.sealing): the Tink keyset that seals them, as
    # JSON (cleartext, or encrypted by the Cloud KMS key ``sensitive_key_uri``), or a file
    # holding it. Needed by every service when a flow marks a field; ``relayflow local up``
    # makes a cleartext one in its state dir.
    sensitive_keyset: str | None = Field(default=None, min_length=1)
    sensitive_keyset_file: Path | None = None
    sensitive_key_uri: str | None = Field(
        default=None,
        pattern=r"^gcp-kms://projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+$",
    )

    # Metrics: "none" builds nothing, so metrics off cost nothing; "local" only keeps them
    # for GET /metrics; "console" also prints them to stderr; "gcp" exports to Cloud Monitoring.
    metrics_exporter: Literal["none", "gcp", "console", "local"] = "none"
    metrics_export_interval_s: float = Field(default=60.0, ge=5, le=3600)

    # Tenants' limits and priorities, as JSON (see relayflow.core.tenants and the README's
    # "Tenants"): ``{"default": {...}, "tenants": {"acme": {"max_running": 50, ...}}}``.
    tenants: Tenants = Tenants()
    # Dependencies' circuit breakers and retry budgets, as JSON (see
    # relayflow.core.breaker_policy): ``{"default": {...}, "dependencies": {"client-api": {...}}}``;
    # ``{"default": {"enabled": false}}`` turns them off. Steps name their dependency.
    dependencies: Dependencies = Dependencies()
    # Window documents per dependency: each takes about one write a second per instance
    # sharing it, so raise this with the instances that call one dependency.
    breaker_shards: int = Field(default=4, ge=1, le=64)
    # Index shards of the flow-rate Firestore collections (topology.json's firestore.shards,
    # which explains the default): may grow, never shrink below a count documents were
    # written under, or the documents of the dropped shards vanish from listings and the
    # sweeper.
    firestore_shards: int = Field(
        default_factory=lambda: load_topology().firestore.shards, ge=1, le=1024
    )

    # Queues of each kind (steps, polls and their high twins): one whole number for every
    # kind, since a flow's tasks all go to one shard number, chosen from its key when it is
    # created (a Cloud Tasks queue dispatches at most 500 tasks/s:
    # https://cloud.google.com/tasks/docs/reference/rest/v2/projects.locations.queues#ratelimits).
    # None: topology.json's. Grow it, never lower it below a shard that still holds tasks.
    queue_shards: int | None = None

    # Payload offload (``core.payloads``): values whose JSON is over the threshold go to this
    # Cloud Storage bucket and the flow's document holds a reference; None: none do, and a
    # start input is at most 64 KiB, a step output 256 KiB. The bucket's lifecycle rule must
    # keep objects ``core.payloads.lifecycle_age_days(retention_days)`` days (Terraform).
    offload_bucket: str | None = Field(
        default=None, pattern=r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$"
    )
    offload_threshold_bytes: int = Field(
        default=DEFAULT_THRESHOLD_BYTES, ge=MIN_THRESHOLD_BYTES, le=MAX_THRESHOLD_BYTES
    )
    storage_emulator_host: str | None = Field(
        default=None, validation_alias="STORAGE_EMULATOR_HOST"
    )

    # Distributed tracing: "none" builds no tracer at all, so tracing off costs nothing.
    trace_exporter: Literal["none", "gcp", "console"] = "none"
    # Share of new traces kept; a flow whose start message carries a sampled parent is kept.
    trace_sample_ratio: float = Field(default=1.0, ge=0, le=1)

    # -- the api's guards (relayflow.web.guard)
    # Origins of the pages whose forms and requests may change state through the api, besides
    # its own URL's, as a JSON list of scheme://host[:port]: by default the documented
    # `gcloud run services proxy api --port 8080`; [] refuses the proxy's browser forms.
    api_origins: tuple[str, ...] = ("http://localhost:8080", "http://127.0.0.1:8080")
    # With token verification off (the local stack), Host headers the api answers besides
    # 127.0.0.1, localhost and [::1] at its port and its URL's host: JSON list of host[:port].
    api_hosts: tuple[str, ...] = ()

    @field_validator("api_scopes")
    @classmethod
    def _scopes(cls, scopes: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        for email, tenants in scopes.items():
            bad = [t for t in tenants if not re.fullmatch(TENANT_PATTERN, t)]
            if not tenants or bad:
                raise ValueError(
                    f"{email}: name at least one tenant, each matching {TENANT_PATTERN}"
                    + (f" (not {bad})" if bad else "")
                )
        return scopes

    @field_validator(
        "sensitive_keyset", "sensitive_keyset_file", "sensitive_key_uri", mode="before"
    )
    @classmethod
    def _unset_if_empty(cls, value: object) -> object:
        return None if value == "" else value  # as Terraform sets them when there is none

    @model_validator(mode="after")
    def _one_keyset(self) -> Settings:
        if self.sensitive_keyset is not None and self.sensitive_keyset_file is not None:
            raise ValueError(
                "set RELAYFLOW_SENSITIVE_KEYSET (the keyset) or RELAYFLOW_SENSITIVE_KEYSET_FILE "
                "(a file holding it), not both"
            )
        return self

    @field_validator("poll_chain", mode="before")
    @classmethod
    def _poll_chain(cls, value: object) -> object:
        text = str(value).strip()
        if isinstance(value, bool) or not text.isdigit() or not 1 <= int(text) <= MAX_POLL_CHAIN:
            raise ValueError(
                f"RELAYFLOW_POLL_CHAIN is how many polls run between two writes of a flow's "
                f"document, one whole number 1..{MAX_POLL_CHAIN} (1: every poll writes; "
                f"default {POLL_CHAIN}), not {value!r}"
            )
        return int(text)

    @field_validator("queue_shards", mode="before")
    @classmethod
    def _queue_shards(cls, value: object) -> object:
        if value is None or value == "":
            return None
        text = str(value).strip()
        if isinstance(value, bool) or not text.isdigit() or not 1 <= int(text) <= MAX_QUEUE_SHARDS:
            raise ValueError(
                f"RELAYFLOW_QUEUE_SHARDS is one whole number of queues per kind, "
                f"1..{MAX_QUEUE_SHARDS} (the same for steps, polls and their high twins), "
                f"not {value!r}"
            )
        return int(text)

    @field_validator("offload_bucket", mode="before")
    @classmethod
    def _no_bucket(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("storage_emulator_host")
    @classmethod
    def _storage_host(cls, value: str | None) -> str | None:
        """google-cloud-storage takes a URL (``http://127.0.0.1:9023``) or HOST:PORT."""
        if value is None or value == "":
            return None
        return cls._host_port(value.removeprefix("http://").removeprefix("https://")) and value

    @field_validator("pubsub_emulator_host", "firestore_emulator_host", "cloud_tasks_emulator_host")
    @classmethod
    def _host_port(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"expected HOST:PORT, got {value!r}")
        return value


def load_settings(**overrides: object) -> Settings:
    """Settings from the environment (``overrides`` win, e.g. a CLI's ``--app``); raises
    pydantic.ValidationError naming each bad field."""
    return Settings(**overrides)  # type: ignore[arg-type]

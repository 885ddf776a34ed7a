"""``relayflow.Client``: start flows, wait for their results, read and operate them.

::

    from relayflow import Client

    client = Client()                        # the local stack's env file, or ADC in the cloud
    handle = client.start("registration", {"resource": "acme-1"}, flow_id="acme-1")
    print(handle.result(timeout=60))         # the flow's output; FlowFailed if it did not succeed

Starting publishes the start message on ``flow-requests`` (a tenant's on its own topic), after
the checks the start function makes (``core.messages.validate_start``): a bad start raises
``InvalidMessage`` with the reason the function would have recorded, and nothing is published.
With the app's registry (``Client(registry=…)``) the flow's name and its input model are
checked too. Every handle has its flow id before anything is published: the caller's, or a
new UUID.

Waiting does not poll. By default (``wait="events"``) the client streams one subscription of
its own on ``flow-results`` (``relayflow.client.results``) and resolves waiters in memory; a
handle started after that subscription existed needs no read at all, any other one reads its
flow once when it starts to wait (the event may have gone out before). ``wait="api"`` is for
callers that may not subscribe: each wait is a long-poll, ``GET /flows/{id}?wait_s=…``, which
the api answers as soon as the flow ends. Make one Client per process and share it: it is
thread-safe, and each one has its own subscription.

Reads and operations (``status``, ``cancel``, ``retry``, ``list``, ``complete_callback``,
``bulk``) go through the api, as the CLI's do (``relayflow.client.transport``).

A flow's sensitive fields (``relayflow.core.sealing``) come sealed in its result event: a
client holding the deployment's key (``sealer=``, or ``RELAYFLOW_SENSITIVE_KEYSET[_FILE]``
and ``RELAYFLOW_SENSITIVE_KEY_URI`` in its environment, as the services have them) opens them
in ``result()``; one without returns the data with the sealed markers in it (a dict, not the
output model). Through the api (``wait="api"``) they come as the api shows them to the
caller: ``"[redacted]"`` unless it is a sensitive reader.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import google.auth
from google.api_core.exceptions import GoogleAPICallError
from google.cloud.pubsub_v1 import PublisherClient, SubscriberClient
from google.cloud.pubsub_v1.types import (
    BatchSettings,
    LimitExceededBehavior,
    PublisherOptions,
    PublishFlowControl,
)
from pydantic import BaseModel

from relayflow.client.results import ResultSubscription
from relayflow.client.transport import ApiError, Transport, quoted
from relayflow.client.views import CallbackOutcome, FlowFailed, FlowPage, FlowStatus, WaitTimeout
from relayflow.client.waiters import FlowResult, WaitKey
from relayflow.core.codec import PLAIN, Chain, Slot
from relayflow.core.errors import InvalidMessage, RelayflowError, UnknownFlow
from relayflow.core.flows import Registry
from relayflow.core.messages import MAX_INPUT_BYTES, validate_start
from relayflow.core.payloads import MAX_OFFLOADED_INPUT_BYTES, Offload, refs
from relayflow.core.records import flow_key
from relayflow.core.sealing import Sealer, markers, opened_result
from relayflow.core.tenants import DEFAULT_TENANT, TENANT_PATTERN
from relayflow.gcp import blobs
from relayflow.gcp.sealer import sealer_from_env
from relayflow.topology import Topology, load_topology

WaitMode = Literal["events", "api"]
PUBLISH_TIMEOUT_S = 30.0
# The api's cap on one long-poll (relayflow.web.longpoll.MAX_WAIT_S); a longer wait is several.
LONG_POLL_S = 50.0
# A publish request carries at most 1,000 messages and 10 MB
# (https://cloud.google.com/pubsub/quotas#resource_limits): batches stay under both, with room
# for the request's own bytes. 10 ms is the client library's own default latency.
BATCH = BatchSettings(max_messages=1000, max_bytes=9 * 1024 * 1024, max_latency=0.01)
# A single start() goes out at once, not after a batch's latency.
SINGLE = BatchSettings(max_messages=1)
# start_many of 100,000 flows blocks on publishing, not on memory.
FLOW_CONTROL = PublishFlowControl(
    message_limit=10_000,
    byte_limit=64 * 1024 * 1024,
    limit_exceeded_behavior=LimitExceededBehavior.BLOCK,
)


@dataclass(frozen=True)
class Start:
    """One flow for ``start_many``: the arguments of ``start``."""

    flow: str
    input: Mapping[str, Any]
    flow_id: str | None = None
    tenant: str | None = None
    priority: str | None = None
    deadline_s: float | None = None
    # What people find the flow by, e.g. {"order_id": "123"} (relayflow.core.labels).
    labels: Mapping[str, str] | None = None


def label_params(label: str | Iterable[str] | Mapping[str, str] | None) -> list[str]:
    """``label`` as the api's repeated ``label=key=value`` parameters."""
    if label is None:
        return []
    if isinstance(label, str):
        return [label]
    if isinstance(label, Mapping):
        return [f"{key}={value}" for key, value in label.items()]
    return list(label)


class StartManyFailed(RelayflowError):
    """Raised by ``start_many`` when some publishes failed: ``handles`` are the flows that
    were published (None where one failed), ``errors`` each failure by its index."""

    def __init__(self, handles: list[FlowHandle | None], errors: dict[int, Exception]) -> None:
        first = next(iter(errors.items()))
        super().__init__(
            f"{len(errors)} of {len(handles)} publishes failed; #{first[0]}: {first[1]}"
        )
        self.handles = handles
        self.errors = errors


class FlowHandle:
    """One flow, by tenant and id: read it, wait for it, cancel or retry it."""

    def __init__(
        self, client: Client, flow_id: str, *, tenant: str = DEFAULT_TENANT, generation: int = 0
    ) -> None:
        self.client = client
        self.flow_id = flow_id
        self.tenant = tenant
        # The oldest run whose end counts: an event of an earlier one (before a retry) is old.
        self.generation = generation
        # The subscription (epoch) already streaming when this flow's start (or retry) was
        # published: its event cannot have been missed, so waiting reads nothing.
        self.watched_from = 0

    def __repr__(self) -> str:
        return f"FlowHandle({self.flow_id!r}, tenant={self.tenant!r})"

    @property
    def key(self) -> WaitKey:
        return (self.tenant, self.flow_id)

    def status(self) -> FlowStatus:
        """Where the flow is now (FlowNotFound-like ``ApiError`` 404 if there is none yet)."""
        return FlowStatus.from_document(self.client.read(self.flow_id, tenant=self.tenant))

    def wait(self, timeout: float | None = None) -> FlowResult:
        """How the flow ended, whatever the status; ``WaitTimeout`` (saying where it is) if it
        has not within ``timeout`` seconds (None: wait as long as it takes)."""
        return self.client.wait(self, timeout)

    def result(self, timeout: float | None = None) -> Any:
        """The flow's output (its last step's) once it SUCCEEDED — an instance of the flow's
        ``output_model`` when the client has the app's registry and the flow declares one
        (``Client(registry=…)``), else the dict; ``FlowFailed`` if it ended otherwise
        (FAILED, TIMED_OUT, CANCELLED), ``WaitTimeout`` as ``wait``."""
        ended = self.wait(timeout)
        if not ended.succeeded:
            raise FlowFailed(ended)
        return self.client.output_of(ended)

    def cancel(self, reason: str) -> FlowStatus:
        """Cancel it (the operator role): its done steps are undone; the reason is recorded."""
        path = f"/flows/{quoted(self.flow_id)}:cancel?tenant={quoted(self.tenant)}"
        return FlowStatus.from_document(self.client.api.post(path, {"reason": reason}))

    def retry(self, reason: str) -> FlowStatus:
        """Run an ended (not succeeded) flow again as a new generation; waits from now on are
        for that generation's end."""
        path = f"/flows/{quoted(self.flow_id)}:retry?tenant={quoted(self.tenant)}"
        status = FlowStatus.from_document(self.client.api.post(path, {"reason": reason}))
        self.generation = status.generation
        # The new run ends after this answer: the subscription, if it runs, will see it.
        self.client._expect(self)
        return status

    def reset(self, step: str, reason: str, *, undo: bool = True) -> FlowStatus:
        """Run an ended flow again from ``step`` as a new generation (the operator role): with
        ``undo``, what ``step`` and the steps after it did is undone first, newest first;
        without, each replays its effect under the same key. Waits from now on are for that
        generation's end. ``preview_reset`` says first what it would do."""
        path = f"/flows/{quoted(self.flow_id)}:reset?tenant={quoted(self.tenant)}"
        body = {"step": step, "reason": reason, "undo": undo}
        status = FlowStatus.from_document(self.client.api.post(path, body))
        self.generation = status.generation
        self.client._expect(self)  # as a retry: the new run ends after this answer
        return status

    def preview_reset(self, step: str, *, undo: bool = True) -> dict[str, Any]:
        """What ``reset`` would do now, changing nothing: ``allowed`` (and ``reason``), the
        steps that would run again (``rerun``), the effects undone (``undone``, newest first)
        and kept (``kept``)."""
        path = f"/flows/{quoted(self.flow_id)}:reset?tenant={quoted(self.tenant)}"
        return self.client.api.post(path, {"step": step, "undo": undo, "dry_run": True})

    def signal(
        self,
        name: str,
        data: Mapping[str, Any] | None = None,
        *,
        reason: str = "",
        signal_id: str | None = None,
    ) -> dict[str, Any]:
        """Send the flow the signal ``name`` through ``POST /flows/{id}/signals/{name}``; the
        api's answer (``outcome``: delivered, kept or duplicate). A flow that has ended, or a
        signal nothing will wait for, raises ``ApiError`` (409; 404 for no such flow)."""
        body: dict[str, Any] = {"data": dict(data or {}), "reason": reason}
        if signal_id is not None:
            body["signal_id"] = signal_id
        path = f"/flows/{quoted(self.flow_id)}/signals/{quoted(name)}?tenant={quoted(self.tenant)}"
        return self.client.api.post(path, body)


# Reading names no flow's objects: only writing does.
READING = Slot(key="", incarnation="", flow="", version=0, path=())


class Client:
    """Starts flows and waits for them; see the module docstring."""

    def __init__(
        self,
        *,
        project: str | None = None,
        api_url: str | None = None,
        registry: Registry | None = None,
        tenant: str | None = None,
        wait: WaitMode = "events",
        environ: Mapping[str, str] | None = None,
        topology: Topology | None = None,
        subscription_project: str | None = None,
        sealer: Sealer | None = None,
    ) -> None:
        env = os.environ if environ is None else environ
        if wait not in ("events", "api"):
            raise ValueError(f"wait must be 'events' or 'api', not {wait!r}")
        if tenant is not None and not re.fullmatch(TENANT_PATTERN, tenant):
            raise ValueError(f"tenant {tenant!r} is not a tenant name ({TENANT_PATTERN})")
        self.project = project or _project(env)
        # Where the client's own results subscription lives: a service in another project
        # makes it there, attached to relayflow's topic (docs/deploy.md, step 9).
        self.subscription_project = subscription_project or self.project
        self.api = Transport.from_env(env, api_url)
        self.registry = registry
        # Opens sealed result data (None: results keep their markers).
        self.sealer = sealer if sealer is not None else sealer_from_env(env)
        self.tenant = tenant
        self.wait_mode: WaitMode = wait
        self.topology = topology or load_topology()
        self._lock = threading.Lock()
        self._single: PublisherClient | None = None
        self._batched: PublisherClient | None = None
        self._subscription: ResultSubscription | None = None
        self._payloads: Chain | None = None
        # A start input's limit: the deployment's, as its RELAYFLOW_OFFLOAD_BUCKET (set in this
        # client's environment too) says: 8 MiB where it offloads large values, else 64 KiB.
        offloads = bool(env.get("RELAYFLOW_OFFLOAD_BUCKET"))
        self.max_input_bytes = MAX_OFFLOADED_INPUT_BYTES if offloads else MAX_INPUT_BYTES

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Delete the results subscription and stop the publishers."""
        with self._lock:
            subscription, self._subscription = self._subscription, None
            publishers = [p for p in (self._single, self._batched) if p is not None]
            self._single = self._batched = None
        if subscription is not None:
            subscription.close()
        for publisher in publishers:
            publisher.stop()

    def start(
        self,
        flow: str,
        input: Mapping[str, Any],
        *,
        flow_id: str | None = None,
        tenant: str | None = None,
        priority: str | None = None,
        deadline_s: float | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> FlowHandle:
        """Publish one start message and wait for Pub/Sub to take it; the flow's handle.
        ``InvalidMessage`` (nothing published) if the start function would reject it (a
        label it would refuse too: ``labels`` are checked here first)."""
        request = Start(flow, input, flow_id, tenant, priority, deadline_s, labels)
        handle, topic, data = self._prepare(request)
        self._expect(handle)
        publisher = self._publisher(single=True)
        publisher.publish(publisher.topic_path(self.project, topic), data).result(
            timeout=PUBLISH_TIMEOUT_S
        )
        return handle

    def start_many(self, starts: Iterable[Start]) -> list[FlowHandle]:
        """Publish many start messages in batches (up to 1,000 a request), every future
        gathered; the handles in order. All are checked before any is published: one bad
        start raises ``InvalidMessage`` (naming its index) and publishes nothing. Some
        publishes failing raises ``StartManyFailed`` with the handles of the others."""
        prepared = []
        for index, request in enumerate(starts):
            try:
                prepared.append(self._prepare(request))
            except InvalidMessage as exc:
                raise InvalidMessage(f"start #{index}: {exc.reason}") from None
        for handle, _, _ in prepared:
            self._expect(handle)
        publisher = self._publisher(single=False)
        futures = [
            publisher.publish(publisher.topic_path(self.project, topic), data)
            for _, topic, data in prepared
        ]
        handles: list[FlowHandle | None] = []
        errors: dict[int, Exception] = {}
        for index, ((handle, _, _), future) in enumerate(zip(prepared, futures, strict=True)):
            try:
                future.result(timeout=PUBLISH_TIMEOUT_S)
            except (GoogleAPICallError, concurrent.futures.TimeoutError, RuntimeError) as exc:
                errors[index] = exc
                handles.append(None)
                continue
            handles.append(handle)
        if errors:
            raise StartManyFailed(handles, errors)
        return [h for h in handles if h is not None]

    def get(self, flow_id: str, *, tenant: str | None = None) -> FlowHandle:
        """The handle of a flow started elsewhere (no call: ``status()`` reads it). Waiting
        on it reads it once, then waits for the end of the run it is in."""
        handle = FlowHandle(self, flow_id, tenant=tenant or self.tenant or DEFAULT_TENANT)
        handle.generation = -1  # unknown: the first read says
        return handle

    def list(
        self,
        *,
        flow: str | None = None,
        status: str | None = None,
        tenant: str | None = None,
        label: str | Iterable[str] | Mapping[str, str] | None = None,
        code: str | None = None,
        dependency: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        view: Literal["summary", "full"] = "summary",
        counts: bool = False,
    ) -> FlowPage:
        """A page of flows, newest first (``GET /flows``); ``cursor`` is the last page's.
        ``label``: ``"order_id=123"``, several (flows with all of them, the first asked of the
        index), or a mapping; ``code``: an ended flow's result code; ``dependency``: what the
        step that holds a flow up or failed it calls."""
        query = {
            "flow": flow,
            "status": status,
            "tenant": tenant or self.tenant,
            "label": label_params(label),
            "code": code,
            "dependency": dependency,
            "limit": limit,
            "cursor": cursor,
            "view": view,
            "counts": "true" if counts else None,
        }
        page = self.api.get("/flows", query)
        return FlowPage(list(page.get("flows") or []), page.get("next_cursor"), page.get("counts"))

    def bulk(
        self,
        action: Literal["retry", "cancel", "reset"],
        *,
        reason: str,
        rate_per_s: float = 5.0,
        dry_run: bool = True,
        step: str | None = None,
        undo: bool = True,
        **wanted: Any,
    ) -> dict[str, Any]:
        """A bulk ``action`` over every flow ``wanted`` matches (the list's filters: ``flow``,
        ``status``, ``version``, ``tenant``, ``updated_from``, ``updated_to``, ``parent``,
        ``label`` (a ``key=value`` or a list of them), ``code``, ``dependency``): its dry run
        (``POST /bulk``; the operator role), run at once unless ``dry_run``; a reset's
        ``step`` and ``undo``. The bulk action as the api shows it, with the first page of
        its flows' ``previews``."""
        body: dict[str, Any] = {
            "action": action,
            "filter": {k: v for k, v in wanted.items() if v is not None},
            "reason": reason,
            "rate_per_s": rate_per_s,
            "dry_run": dry_run,
        }
        if step is not None:
            body |= {"step": step, "undo": undo}
        return self.api.post("/bulk", body)

    def bulk_run(self, bulk_id: str, *, reason: str = "") -> dict[str, Any]:
        """Run a previewed bulk action: act on exactly the flows its dry run listed."""
        return self.api.post(f"/bulk/{quoted(bulk_id)}:run", {"reason": reason})

    def bulk_status(self, bulk_id: str) -> dict[str, Any]:
        """A bulk action's progress: state, counts, what it waits for (``GET /bulk/{id}``)."""
        return self.api.get(f"/bulk/{quoted(bulk_id)}")

    def complete_callback(
        self,
        token: str,
        *,
        output: Mapping[str, Any] | None = None,
        error: Mapping[str, Any] | None = None,
    ) -> CallbackOutcome:
        """Complete a callback step's token with its ``output``, or fail it with ``error``
        (exactly one of them; the completer role). A token no flow waits for is ``ignored``."""
        if (output is None) == (error is None):
            raise ValueError("complete_callback takes exactly one of output= and error=")
        body: dict[str, Any] = {"token": token}
        body["output" if output is not None else "error"] = dict(output or error or {})
        try:
            answer = self.api.post("/callbacks", body)
        except ApiError as exc:
            if exc.status != 409:
                raise
            return CallbackOutcome("ignored", None, exc.message)
        return CallbackOutcome(
            str(answer.get("outcome")), answer.get("flow_id"), str(answer.get("reason") or "")
        )

    def read(
        self, flow_id: str, *, tenant: str, wait_s: float | None = None, generation: int = 0
    ) -> dict[str, Any]:
        """The flow's document (``GET /flows/{id}``); with ``wait_s``, a long-poll."""
        query: dict[str, Any] = {"tenant": tenant}
        if wait_s is not None:
            query |= {"wait_s": f"{wait_s:.3f}", "generation": max(0, generation)}
        timeout = (wait_s or 0) + 30.0
        return self.api.get(f"/flows/{quoted(flow_id)}", query, timeout_s=timeout)

    def listen(self) -> None:
        """Open the results subscription now (else the first wait does): handles started
        after this need no read when they wait."""
        if self.wait_mode == "events":
            self.subscription().ensure()

    def subscription(self) -> ResultSubscription:
        with self._lock:
            if self._subscription is None:
                self._subscription = ResultSubscription(
                    SubscriberClient(),
                    project=self.project,
                    subscription_project=self.subscription_project,
                    topic=self.topology.topics.results,
                    filter_=_tenant_filter(self.tenant),
                    recover=self._recover,
                )
            return self._subscription

    def subscription_epoch(self) -> int:
        """The epoch of the running subscription (0: none runs)."""
        with self._lock:
            running = self._subscription
        return running.epoch if running is not None and running.path else 0

    def output_of(self, ended: FlowResult) -> Any:
        """A succeeded flow's data, as its version's ``output_model`` when this client has the
        registry and the model (the engine checked the output against it before the flow could
        succeed), else as it came; its sealed values opened if this client holds the key (a
        marker left in it: the dict as it came)."""
        data = None if ended.data is None else self.resolved(ended.data)
        if data is not None and self.sealer is not None:
            data = opened_result(self.sealer, data, flow_key(ended.tenant, ended.flow_id))
        model = self._output_model(ended.flow, ended.version)
        if model is None or data is None or any(True for _ in markers(data)):
            return data
        return model.model_validate(data)

    def resolved(self, data: Any) -> Any:
        """A flow's stored value as its handlers saw it: each payload reference in it
        (``{"$relayflow": {"ref": {bucket, name, sha256, size}}}``, a value too large for the
        flow's document) read from Cloud Storage with this client's credentials and checked
        (``PayloadMissing``, ``PayloadCorrupt``). ``result()`` does this; a FlowResult from
        ``wait()`` holds the data as the flow's document does."""
        if not refs(data):  # most results: no bucket to reach
            return PLAIN.decode(data, READING)
        with self._lock:
            if self._payloads is None:
                reader = blobs.GcsBlobs("", project=self.project)  # refs name their bucket
                self._payloads = Chain([Offload(reader)])
            payloads = self._payloads
        return payloads.decode(data, READING)

    def _output_model(self, flow: str, version: int) -> type[BaseModel] | None:
        if self.registry is None or flow not in self.registry:
            return None
        try:
            return self.registry.get(flow, version or None).output_model
        except UnknownFlow:  # a version this registry does not have: no model to trust
            return None

    def wait(self, handle: FlowHandle, timeout: float | None) -> FlowResult:
        if self.wait_mode == "api":
            return self._long_poll(handle, timeout)
        future = self.register(handle)
        try:
            return future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            raise self.timed_out(handle, timeout) from None
        finally:
            self.release(handle)

    def register(self, handle: FlowHandle) -> concurrent.futures.Future[FlowResult]:
        """Wait for ``handle``'s flow in the table (pair with ``release``), after one read of
        the flow unless the subscription predates its start."""
        subscription = self.subscription()
        epoch = subscription.ensure()
        future, known = subscription.waiters.register(handle.key, max(0, handle.generation))
        if handle.generation < 0 or not known or handle.watched_from != epoch:
            # Its event may have gone out before the subscription (or this wait) was there:
            # read once. Registered first, so an end after this read is an event it gets.
            ended = self._read_end(handle)
            subscription.waiters.narrow(handle.key, handle.generation)
            if ended is not None:
                subscription.waiters.deliver(ended)
        return future

    def _expect(self, handle: FlowHandle) -> None:
        """Before a start (or retry) goes out: with the subscription running, keep the
        flow's end when it comes, so that waiting on it later reads nothing."""
        with self._lock:
            running = self._subscription
        if running is not None and running.path:
            running.waiters.expect(handle.key, max(0, handle.generation))
            handle.watched_from = running.epoch

    def release(self, handle: FlowHandle) -> None:
        if self._subscription is not None:
            self._subscription.waiters.release(handle.key)

    def timed_out(self, handle: FlowHandle, timeout: float | None) -> WaitTimeout:
        """The error of a wait that ran out: it says where the flow is (one read)."""
        try:
            position: FlowStatus | None = handle.status()
        except ApiError as exc:
            if exc.status != 404:
                raise
            position = None
        within = f"within {timeout:g} s" if timeout is not None else "yet"
        where = (
            position.where()
            if position is not None
            else "no such flow yet (its start message not taken yet, or rejected: "
            "`relayflow rejected list` says why)"
        )
        message = f"flow {handle.flow_id} (tenant {handle.tenant}) did not end {within}: {where}"
        return WaitTimeout(message, position)

    def _read_end(self, handle: FlowHandle) -> FlowResult | None:
        """One read: the flow's end if it has ended in the handle's generation or later; a
        handle of unknown generation (``get``) learns the one it is in."""
        try:
            doc = self.read(handle.flow_id, tenant=handle.tenant)
        except ApiError as exc:
            if exc.status != 404:
                raise
            handle.generation = max(0, handle.generation)
            return None
        status = FlowStatus.from_document(doc)
        if handle.generation < 0:
            handle.generation = status.generation
        if status.result is not None and status.generation >= handle.generation:
            return status.result
        return None

    def _recover(self, keys: Sequence[WaitKey]) -> None:
        """The subscription was re-created: what ended in the gap is read, once per flow."""
        subscription = self._subscription
        for tenant, flow_id in keys:
            if subscription is None:
                return
            try:
                doc = self.read(flow_id, tenant=tenant)
            except (ApiError, RelayflowError):
                continue
            ended = FlowResult.from_document(doc)
            if ended is not None:
                subscription.waiters.deliver(ended)

    def _long_poll(self, handle: FlowHandle, timeout: float | None) -> FlowResult:
        clock = _Deadline(timeout)
        while True:
            wait_s = min(LONG_POLL_S, clock.left())
            try:
                doc = self.read(
                    handle.flow_id,
                    tenant=handle.tenant,
                    wait_s=wait_s,
                    generation=handle.generation,
                )
            except ApiError as exc:
                if exc.status != 404:
                    raise
                doc = {}
            if doc:
                status = FlowStatus.from_document(doc)
                if handle.generation < 0:
                    handle.generation = status.generation
                if status.result is not None and status.generation >= handle.generation:
                    return status.result
            if clock.left() <= 0:
                raise self.timed_out(handle, timeout)

    def _prepare_one(
        self, flow: str, input: Mapping[str, Any], **kwargs: Any
    ) -> tuple[FlowHandle, str, bytes]:
        return self._prepare(Start(flow, input, **kwargs))

    def _prepare(self, request: Start) -> tuple[FlowHandle, str, bytes]:
        """The handle, topic and data of one start, checked as the start function would."""
        tenant = request.tenant or self.tenant
        body: dict[str, Any] = {
            "flow": request.flow,
            "input": dict(request.input) if isinstance(request.input, Mapping) else request.input,
            "flow_id": request.flow_id or uuid.uuid4().hex,
        }
        optional = {
            "tenant": tenant,
            "priority": request.priority,
            "deadline_s": request.deadline_s,
            "labels": dict(request.labels) if request.labels else None,
        }
        body |= {k: v for k, v in optional.items() if v is not None}
        return self._prepare_body(body)

    def _prepare_body(self, body: dict[str, Any]) -> tuple[FlowHandle, str, bytes]:
        message, _ = validate_start(body, self.registry, max_input_bytes=self.max_input_bytes)
        assert message.flow_id is not None
        data = json.dumps(body, separators=(",", ":")).encode("utf-8")
        topic = self._topic(message.tenant)
        return (
            FlowHandle(self, message.flow_id, tenant=message.tenant or DEFAULT_TENANT),
            topic,
            data,
        )

    def _topic(self, tenant: str | None) -> str:
        """A named tenant's own topic (the start function takes the tenant from it); the
        shared one starts the default tenant's flows."""
        if not tenant or tenant == DEFAULT_TENANT:
            return self.topology.topics.requests
        return self.topology.tenant_requests.topic_of(tenant)

    def _publisher(self, *, single: bool) -> PublisherClient:
        with self._lock:
            if single:
                if self._single is None:
                    self._single = PublisherClient(batch_settings=SINGLE)
                return self._single
            if self._batched is None:
                self._batched = PublisherClient(
                    batch_settings=BATCH,
                    publisher_options=PublisherOptions(flow_control=FLOW_CONTROL),
                )
            return self._batched


class _Deadline:
    def __init__(self, timeout: float | None) -> None:
        self._end = None if timeout is None else time.monotonic() + timeout

    def left(self) -> float:
        return float("inf") if self._end is None else max(0.0, self._end - time.monotonic())


def _project(environ: Mapping[str, str]) -> str:
    """The project: ``RELAYFLOW_PROJECT_ID``, ``GOOGLE_CLOUD_PROJECT``, or ADC's own."""
    named = environ.get("RELAYFLOW_PROJECT_ID") or environ.get("GOOGLE_CLOUD_PROJECT")
    if named:
        return named
    _, project = google.auth.default()
    if not project:
        raise RelayflowError(
            "no project: set GOOGLE_CLOUD_PROJECT (or RELAYFLOW_PROJECT_ID), or pass "
            "Client(project=...)"
        )
    return str(project)


def _tenant_filter(tenant: str | None) -> str:
    """A client of one tenant subscribes to that tenant's events only (a Pub/Sub filter on
    the ``tenant`` attribute: https://cloud.google.com/pubsub/docs/subscription-message-filter)."""
    if not tenant:
        return ""
    return f'attributes.tenant = "{tenant}"'

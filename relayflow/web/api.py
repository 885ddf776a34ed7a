"""The operator api and its console: read flows, cancel, retry, reset, replay — each by role.

| route | role | what |
|---|---|---|
| ``GET /flows`` | viewer | a page of flows: filters, ``cursor``, ``limit``, ``view``, ``counts`` |
| | | filters: ``flow``, ``status``, ``version``, ``tenant``, ``parent``, ``label=k=v`` |
| | | (repeatable: all), ``code``, ``dependency``, ``updated_from``, ``updated_to`` |
| ``GET /flows:counts`` | viewer | how many flows in each status (same filters, one label) |
| ``GET /flows/{id}`` | viewer | the document (tokens for operators only; sensitive fields |
| | | ``[redacted]`` but for sensitive readers: ``redaction``), ``polls_in_flight`` |
| ``GET /flows/{id}?resolve=true`` | viewer | offloaded input, outputs and result read back |
| ``GET /flows/{id}?wait_s=`` | viewer | long-poll: answers once the flow ends (``longpoll``) |
| | | and ``family``: a child's parent, the list of its children (``?parent=``) |
| ``GET /flows/{id}/lanes`` | viewer | where each ForEach item is |
| ``POST /flows/{id}:cancel``, ``:retry`` | operator | ``{"reason"}``, recorded with the caller |
| ``POST /flows/{id}:undo`` | operator | ``{"reason"}``: undo again what an ended flow left live |
| ``POST /flows/{id}:reset`` | operator | ``{"step", "reason", "undo", "dry_run"}``: run it again |
| | | from a step (``dry_run``: say what it would do, change nothing) |
| ``GET /rejected`` | viewer | refused messages with their reasons (``cursor``, ``limit``) |
| ``GET /dead-letters`` | viewer | held dead-lettered start messages |
| ``POST /dead-letters/{id}:replay`` | operator | ``{"reason", "data"?}``: publish, then ack |
| ``GET /tenants`` | viewer | each tenant's limits, paused or not, flows running and waiting |
| ``POST /tenants/{t}:pause``, ``:resume`` | operator | ``{"reason"}``: stop or go on dispatching |
| ``GET /breakers`` | viewer | each dependency's breaker: state, window, budget, transitions |
| ``GET /schedules`` | viewer, unscoped | each schedule: next ticks (its zone, UTC), last runs |
| ``POST /schedules/{s}:pause``, ``:resume`` | operator, unscoped | ``{"reason"}`` |
| ``POST /schedules/{s}:trigger`` | operator, unscoped | ``{"reason", "flow_id"?}``: run it now |
| ``POST /bulk`` | operator | ``{action, filter, reason, dry_run, rate_per_s}`` (``bulk``) |
| ``GET /bulk``, ``/bulk/{id}``, ``/bulk/{id}/previews`` | viewer | progress, per-flow rows |
| ``POST /bulk/{id}:run``, ``:pause``, ``:resume``, ``:cancel`` | operator | ``{"reason"}`` |
| ``GET /whoami`` | viewer | the caller's identity, role and tenants |
| ``GET /schemas``, ``/schemas/{name}`` | viewer | the messages' published JSON Schemas |
| ``GET /definitions`` | viewer | each flow's steps and input/output JSON Schemas (``flow``) |
| ``GET /versions`` | viewer, unscoped | flows not ended on each version (``flow``, ``version``) |
| ``GET /stats``, ``/metrics`` | viewer, unscoped | this process's cost counters and metrics |
| ``POST /callbacks``, ``/signals`` | completer | complete a callback token (never in a URL) |
| ``POST /flows/{id}/signals/{name}`` | signaller | ``{"data", "signal_id", "reason", "item"}`` |

``polls_in_flight``: the polls a flow's poll chain ran that its document has not recorded yet
(read from the chain's newest task, each marked ``"written": false``); the chain's next
checkpoint writes them to ``history``.

A caller scoped to tenants (``RELAYFLOW_API_SCOPES``) sees and acts on those tenants only.
Before any route, ``guard`` refuses what only another site's page would send (every
state-changing route: JSON bodies, console forms from the api's own origins, known hosts).

Routes are thin: identify the caller, read and check the parameters (``params``), call one
engine or store method. Errors raise; one table (``relayflow.web.operations``) maps them to
Google-style JSON errors.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from flask import Flask, Response, g, redirect, request, url_for

from relayflow.core.dead_letters import DeadLetter
from relayflow.core.engine import Engine
from relayflow.core.errors import FlowNotFound, RelayflowError
from relayflow.core.flows import Registry
from relayflow.core.listing import FlowSummary, Page
from relayflow.core.ports import Listing
from relayflow.core.records import FlowRecord, HistoryEntry, flow_key
from relayflow.core.sealing import Sealing
from relayflow.core.state import Status
from relayflow.core.tenants import DEFAULT_TENANT
from relayflow.runtime import Runtime, api_verifier
from relayflow.web import console, guard, longpoll, params
from relayflow.web.access import Caller, Forbidden, Role, access_from_settings
from relayflow.web.bulk import add_bulk_routes
from relayflow.web.callbacks import add_callback_routes, add_item_routes
from relayflow.web.family import family_json
from relayflow.web.guard import guard_from_settings
from relayflow.web.operations import Operations, caller, guarded, refusal, tenants_seen
from relayflow.web.payloads import read_back
from relayflow.web.redaction import shown_doc, shown_letter
from relayflow.web.schedules import add_schedule_routes
from relayflow.web.schemas import add_definition_routes, add_schema_routes
from relayflow.web.services import base_app, error
from relayflow.web.signals import add_signal_routes
from relayflow.web.versions import add_version_routes

log = logging.getLogger("relayflow.web.api")
DEFAULT_CANCEL_REASON = "cancelled by an operator"
DEFAULT_UNDO_REASON = "undone again by an operator"
DEFAULT_RESET_REASON = "reset by an operator"
# What a caller below the operator role sees of a live callback token: a viewer may not
# complete it, and a token it could read it could complete through any completer.
REDACTED = "(redacted: operators only)"


def api_app(runtime: Runtime) -> Flask:
    """The api service: the JSON api and the console, over the runtime's engine and store."""
    return build_api(
        Operations(
            engine=runtime.engine,
            store=runtime.store,
            access=access_from_settings(runtime.settings, api_verifier(runtime.settings)),
            dead_letters=runtime.dead_letter_hold(),
            counters=runtime.counters,
            metrics=runtime.metrics,
            registry=runtime.registry,
            guard=guard_from_settings(runtime.settings),
            watch=document_watch(runtime),
            scheduler=runtime.scheduler(),
            sealing=runtime.sealing,
            bulk=runtime.bulk_runner(),
        )
    )


def build_api(ops: Operations) -> Flask:
    reader = guarded(ops.access, Role.VIEWER, "read the api's counters and metrics", unscoped=True)
    app = base_app("relayflow-api", ops.counters, ops.metrics, reader=reader)
    guard.install(app, ops.guard, check_hosts=not ops.access.verifying)
    _register_timing(app)
    _register_errors(app)
    _register_flows(app, ops)
    _register_reset(app, ops)
    _register_messages(app, ops)
    _register_tenants(app, ops)
    add_schedule_routes(app, ops)
    add_bulk_routes(app, ops)
    add_callback_routes(
        app, ops.engine, guarded(ops.access, Role.COMPLETER, "complete callback tokens")
    )
    add_item_routes(app, ops.engine, guarded(ops.access, Role.VIEWER, "read flows"))
    add_schema_routes(app, guarded(ops.access, Role.VIEWER, "read the message schemas"))
    add_definition_routes(
        app, ops.registry, guarded(ops.access, Role.VIEWER, "read the flows' definitions")
    )
    add_signal_routes(app, ops.engine, guarded(ops.access, Role.SIGNALLER, "send signals"))
    add_version_routes(app, ops)
    app.register_blueprint(console.blueprint(ops))

    @app.get("/")
    def home() -> Any:
        return redirect(url_for("console.home"))

    return app


def _register_timing(app: Flask) -> None:
    """``Server-Timing: app;dur=<ms>`` on every answer: the api's own time, almost all of it
    Firestore's, which a browser's developer tools and bench/cli_startup.py read."""

    @app.before_request
    def started() -> None:
        g.started = time.perf_counter()

    @app.after_request
    def timed(response: Response) -> Response:
        began = g.get("started")
        if began is not None:
            elapsed_ms = (time.perf_counter() - began) * 1000
            response.headers["Server-Timing"] = f"app;dur={elapsed_ms:.1f}"
        return response


def _register_errors(app: Flask) -> None:
    @app.errorhandler(RelayflowError)
    def refused(exc: RelayflowError) -> tuple[Response, int]:
        status, code = refusal(exc)
        if status == 500:
            raise exc  # not a refusal: the 500 handler answers, and Flask logs it
        if status in (401, 403):
            path = guard.logged_path(request.path)
            log.warning("refused", extra={"path": path, "reason": str(exc)})
        return error(status, code, str(exc))


def _register_flows(app: Flask, ops: Operations) -> None:
    viewer = guarded(ops.access, Role.VIEWER, "read flows")

    @app.get("/flows")
    @viewer
    def list_flows() -> Any:
        query = params.list_query(request.args)
        query = replace(query, filter=caller().narrow(query.filter))
        with_counts = params.flag(request.args.get("counts"), name="counts")
        page = page_of(ops.store, query)
        body: dict[str, Any] = {
            "flows": [shown_json(item, caller(), ops.sealing) for item in page.items],
            "next_cursor": page.next.encode() if page.next else None,
            "view": query.view,
        }
        if with_counts:
            body["counts"] = _counts(ops.store.count_by_status(query.filter))
        return body

    @app.get("/flows:counts")
    @viewer
    def count_flows() -> Any:
        counts = ops.store.count_by_status(caller().narrow(params.flow_filter(request.args)))
        return {"counts": _counts(counts), "total": sum(counts.values())}

    @app.get("/flows/<flow_id>")
    @viewer
    def get_flow(flow_id: str) -> Any:
        wait_s = longpoll.wait_param(request.args.get("wait_s"))
        generation = longpoll.generation_param(request.args.get("generation"))
        if wait_s is not None and ops.watch is not None:
            record = waited_flow(ops, flow_id, ops.watch, wait_s=wait_s, generation=generation)
        else:
            record = shown_flow(ops, flow_id)
        resolve = request.args.get("resolve")
        doc = flow_json(record, caller(), ops.sealing, engine=ops.engine, resolve=resolve)
        doc["polls_in_flight"] = in_flight_json(ops.engine.polls_in_flight(record))
        doc["family"] = family_json(record)  # its parent, and how to list its children
        return doc

    @app.post("/flows/<flow_id>:cancel")
    @guarded(ops.access, Role.OPERATOR, "cancel flows")
    def cancel_flow(flow_id: str) -> Any:
        why = params.reason(
            guard.body().get("reason"), required=False, default=DEFAULT_CANCEL_REASON
        )
        record = ops.engine.cancel(shown_flow(ops, flow_id).key, why, by=caller().identity)
        return flow_json(record, caller(), ops.sealing)

    @app.post("/flows/<flow_id>:retry")
    @guarded(ops.access, Role.OPERATOR, "retry flows")
    def retry_flow(flow_id: str) -> Any:
        why = params.reason(guard.body().get("reason"), required=False)
        flow = shown_flow(ops, flow_id).key
        record = ops.engine.retry(flow, reason=why, by=caller().identity)
        return flow_json(record, caller(), ops.sealing)

    @app.post("/flows/<flow_id>:undo")
    @guarded(ops.access, Role.OPERATOR, "undo flows again")
    def undo_flow(flow_id: str) -> Any:
        why = params.reason(guard.body().get("reason"), required=False, default=DEFAULT_UNDO_REASON)
        flow = shown_flow(ops, flow_id).key
        record = ops.engine.undo(flow, reason=why, by=caller().identity)
        return flow_json(record, caller(), ops.sealing)

    @app.get("/whoami")
    @viewer
    def whoami() -> Any:
        tenants = caller().tenants
        return {
            "identity": caller().identity,
            "role": caller().role.label,
            "tenants": sorted(tenants) if tenants is not None else None,
        }


def _register_reset(app: Flask, ops: Operations) -> None:
    @app.post("/flows/<flow_id>:reset")
    @guarded(ops.access, Role.OPERATOR, "reset flows")
    def reset_flow(flow_id: str) -> Any:
        """Run an ended flow again from a step; ``dry_run``: what that would do, nothing done."""
        sent = guard.body()
        step = params.step_name(sent.get("step"))
        undo = params.boolean(sent.get("undo"), name="undo", default=True)
        dry_run = params.boolean(sent.get("dry_run"), name="dry_run", default=False)
        why = params.reason(sent.get("reason"), required=False, default=DEFAULT_RESET_REASON)
        flow = shown_flow(ops, flow_id).key
        if dry_run:
            return {"dry_run": True, **ops.engine.preview_reset(flow, step, undo=undo).as_json()}
        record = ops.engine.reset(flow, step, undo=undo, reason=why, by=caller().identity)
        return flow_json(record, caller(), ops.sealing)


def _register_messages(app: Flask, ops: Operations) -> None:
    viewer = guarded(ops.access, Role.VIEWER, "read rejected and dead-lettered messages")

    @app.get("/rejected")
    @viewer
    def list_rejected() -> Any:
        caller().unscoped("read rejected messages")
        page = ops.store.rejected_messages(
            after=params.cursor(request.args.get("cursor")),
            limit=params.limit(request.args.get("limit")),
        )
        return {
            "rejected": [m.model_dump(mode="json") for m in page.items],
            "next_cursor": page.next.encode() if page.next else None,
        }

    @app.get("/dead-letters")
    @viewer
    def list_dead_letters() -> Any:
        caller().unscoped("read dead letters")
        held = ops.dead_letters.held(limit=params.limit(request.args.get("limit"), default=100))
        return {"dead_letters": [dead_letter_json(letter, ops.registry) for letter in held]}

    @app.post("/dead-letters/<message_id>:replay")
    @guarded(ops.access, Role.OPERATOR, "replay dead letters")
    def replay_dead_letter(message_id: str) -> Any:
        caller().unscoped("replay dead letters")
        body = guard.body()
        published = ops.dead_letters.replay(
            params.message_id(message_id),
            by=caller().identity,
            reason=params.reason(body.get("reason"), required=True),
            data=params.replay_data(body.get("data")),
            vet=params.vet_replay,
        )
        return {"replayed": message_id, "message_id": published}


def _register_tenants(app: Flask, ops: Operations) -> None:
    @app.get("/tenants")
    @guarded(ops.access, Role.VIEWER, "read tenants")
    def list_tenants() -> Any:
        return {"tenants": tenants_seen(ops, caller())}

    for action, paused in (("pause", True), ("resume", False)):
        _tenant_action(app, ops, action, paused=paused)

    @app.get("/breakers")
    @guarded(ops.access, Role.VIEWER, "read breakers")
    def list_breakers() -> Any:
        return {"breakers": ops.engine.breaker_views()}


def _tenant_action(app: Flask, ops: Operations, action: str, *, paused: bool) -> None:
    @app.post(f"/tenants/<tenant>:{action}", endpoint=f"{action}_tenant")
    @guarded(ops.access, Role.OPERATOR, f"{action} tenants")
    def act(tenant: str) -> Any:
        name = params.tenant(tenant)
        assert name is not None  # a route segment is never empty
        if not caller().sees(name):
            raise Forbidden(f"{caller().identity} may not {action} tenant {name!r}")
        why = params.reason(guard.body().get("reason"), required=True)
        if paused:
            state = ops.engine.pause_tenant(name, by=caller().identity, reason=why)
            return {"tenant": state.tenant, "paused": True, "by": state.by, "reason": why}
        resumed = ops.engine.resume_tenant(name, by=caller().identity, reason=why)
        return {
            "tenant": name,
            "paused": resumed.state.paused,
            "by": resumed.state.by,
            "reason": why,
            # Tasks the pause had put off, run now rather than at their next look.
            "brought_forward": resumed.brought_forward,
        }


def shown_flow(ops: Operations, flow_id: str) -> FlowRecord:
    """The flow with that id (``tenant=`` says whose, when several tenants use the id), if the
    caller may see its tenant; FlowNotFound (404) as for a missing one."""
    tenant = params.tenant(request.args.get("tenant"))
    return ops.engine.find(params.flow_id(flow_id), tenant=tenant, visible=caller().sees)


def waited_flow(
    ops: Operations, flow_id: str, watch: longpoll.Watch, *, wait_s: float, generation: int
) -> FlowRecord:
    """The long-poll (``relayflow.web.longpoll``): the flow once it has ended in
    ``generation`` or later, or as it is when ``wait_s`` has passed; a flow that does not
    exist yet is waited for under the tenant the request names (FlowNotFound if it still
    does not exist, or is not the caller's to see)."""
    try:
        record: FlowRecord | None = shown_flow(ops, flow_id)
    except FlowNotFound:
        tenant = params.tenant(request.args.get("tenant")) or DEFAULT_TENANT
        if not caller().sees(tenant):
            raise
        record, key = None, flow_key(tenant, params.flow_id(flow_id))
    else:
        assert record is not None
        key = record.key
        if longpoll.has_ended(record, generation):
            return record
    seen, _ = longpoll.wait_for_end(watch, key, wait_s=wait_s, generation=generation)
    found = seen or record
    if found is None:
        raise FlowNotFound(f"no flow {flow_id!r} (waited {wait_s:g} s for it)")
    return found


def document_watch(runtime: Runtime) -> longpoll.Watch:
    """Follow a flow's document with a Firestore snapshot listener (as ``relayflow watch``)."""

    def watch(key: str, on_change: longpoll.OnChange) -> Callable[[], None]:
        def changed(docs: list[Any], *_: object) -> None:
            for doc in docs:
                try:
                    on_change(FlowRecord.from_doc(doc.to_dict() or {}) if doc.exists else None)
                except ValueError as exc:  # a document this release cannot read: no end
                    log.warning("long-poll: unreadable flow document", extra={"error": exc})

        listener = runtime.store.reference(key).on_snapshot(changed)
        return listener.unsubscribe  # type: ignore[no-any-return]

    return watch


def flow_json(
    record: FlowRecord,
    viewer: Caller,
    sealing: Sealing | None = None,
    *,
    engine: Engine | None = None,
    resolve: str | None = None,
) -> dict[str, Any]:
    """``record`` as JSON for ``viewer``: its callback tokens only for callers who may complete
    them (operators); a viewer sees that a step waits, not the token that would end the wait.
    ``resolve`` (the ``?resolve=`` flag) true: offloaded values read back (``engine``'s).
    Its sensitive fields ``"[redacted]"`` unless ``viewer`` may read them (``redaction``),
    those read back too."""
    if engine is not None and params.flag(resolve, name="resolve"):
        record = read_back(engine, record)
    doc = record.model_dump(mode="json")
    doc = shown_doc(doc, record, viewer, sealing)
    if not viewer.may(Role.OPERATOR):
        # A track holds its step's live token; an effect, the token its run sent (for its
        # undo), live until the step completes.
        for holder in (*doc.get("tracks", {}).values(), *doc.get("effects", [])):
            if holder.get("token"):
                holder["token"] = REDACTED
    return doc


def in_flight_json(entries: Iterable[HistoryEntry]) -> list[dict[str, Any]]:
    """Polls a chain ran that the document has not recorded yet, as history entries marked
    ``"written": false`` (the chain's next checkpoint writes them to ``history``)."""
    return [{**e.model_dump(mode="json"), "written": False} for e in entries]


def shown_json(
    item: FlowSummary | FlowRecord, viewer: Caller, sealing: Sealing | None
) -> dict[str, Any]:
    """A list's item as JSON: a whole document as ``flow_json`` shows it."""
    if isinstance(item, FlowRecord):
        return flow_json(item, viewer, sealing)
    return item.model_dump(mode="json")


def page_of(store: Listing, query: params.ListQuery) -> Page[FlowSummary] | Page[FlowRecord]:
    """The page ``query`` asks for, in its view: summaries, or whole documents."""
    if query.view == "full":
        return store.flows(query.filter, after=query.after, limit=query.limit)
    return store.summaries(query.filter, after=query.after, limit=query.limit)


def dead_letter_json(letter: DeadLetter, registry: Registry | None = None) -> dict[str, Any]:
    data, redacted = shown_letter(letter, registry)
    return {
        "message_id": letter.message_id,
        "published_at": letter.published_at.isoformat() if letter.published_at else None,
        "delivery_count": letter.delivery_count,
        "attributes": letter.attributes,
        "data": data,
        "redacted": redacted,  # what of data was left out: flows' sensitive input fields
        "data_bytes": len(letter.data),
        "goes_to": letter.goes_to,
        "signal": letter.signal,
    }


def _counts(counts: dict[Status, int]) -> dict[str, int]:
    return {status.value: counts.get(status, 0) for status in Status}

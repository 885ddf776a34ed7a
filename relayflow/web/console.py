"""The console: server-rendered pages for people, served by the api with the api's auth.

Flows (filters, counts per status, cursor paging, newest first); one flow (its timeline,
input, outputs, result, next due task, refreshed every second while it runs); cancel and
retry behind a confirmation page that asks why; reset to a step behind its dry run; rejected
messages; dead letters and their replay. Jinja templates, one stylesheet and a few lines of
JavaScript for the live view: no build step, and nothing inline (the Content-Security-Policy
admits the api's own files only). Every action goes through the same engine and store calls
as the JSON api; its forms pass the api's guard (``relayflow.web.guard``: only from the api's
own origins).

A flow is named by its id and, when it is not the default tenant's, ``?tenant=``: flow ids
are each tenant's own.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, NamedTuple

from flask import Blueprint, g, redirect, render_template, request, url_for
from werkzeug.wrappers import Response as Redirect

from relayflow.core import planner
from relayflow.core.definitions import definitions
from relayflow.core.errors import (
    PayloadCorrupt,
    PayloadMissing,
    PayloadUnavailable,
    RelayflowError,
    UnknownFlow,
)
from relayflow.core.flows import Flow
from relayflow.core.listing import FlowFilter, Uncountable
from relayflow.core.records import FlowRecord
from relayflow.core.state import ACTIVE, TERMINAL, Status
from relayflow.core.tenants import DEFAULT_TENANT
from relayflow.core.versions import VersionUse, pairs, version_uses
from relayflow.web import (
    console_breakers,
    console_bulk,
    console_schedules,
    console_tenants,
    params,
    payloads,
    timeline,
)
from relayflow.web.access import Caller, Role
from relayflow.web.family import family_json
from relayflow.web.operations import Guard, Operations, guarded, refusal
from relayflow.web.redaction import shown_letter, shown_record

# The list page keeps its filters and its page size in the links it makes.
FILTER_FIELDS = (*params.FILTER_FIELDS, "limit")
NOTICES = {
    "cancelled": "Cancel recorded: the flow undoes its completed steps, then ends CANCELLED.",
    "retried": "Retry recorded: a new generation has started.",
    "undone": "Undo recorded: a new clean-up undoes what the flow left live, newest first.",
    "reset": "Reset recorded: a new generation undoes what its dry run listed, then runs again.",
    "signalled": "Signal sent: the step that waited for it goes on, your name and reason recorded.",
}


def blueprint(ops: Operations) -> Blueprint:
    """The console's pages, under ``/console``."""
    bp = Blueprint(
        "console",
        __name__,
        url_prefix="/console",
        template_folder="templates",
        static_folder="static",
    )
    viewer = guarded(ops.access, Role.VIEWER, "read flows")
    operator = guarded(ops.access, Role.OPERATOR, "cancel, retry or replay")
    _register_filters(bp)
    _register_guards(bp)
    _register_flow_pages(bp, ops, viewer)
    _register_actions(bp, ops, operator)
    _register_reset(bp, ops, operator)
    _register_message_pages(bp, ops, viewer, operator)
    console_schedules.register(bp, ops)
    console_tenants.register(bp, ops)
    console_breakers.register(bp, ops)
    console_bulk.register(bp, ops)
    _register_signals(bp, ops, guarded(ops.access, Role.SIGNALLER, "send signals"))
    return bp


def _register_guards(bp: Blueprint) -> None:
    # Forms post with the browser's credentials (a proxy's token, or none on 127.0.0.1): the
    # api's guard (relayflow.web.guard) admits them only from the api's own origins.

    @bp.context_processor
    def helpers() -> dict[str, Any]:
        return {"Role": Role, "flow_url": flow_url}

    @bp.errorhandler(RelayflowError)
    def refused(exc: RelayflowError) -> tuple[str, int]:
        status, code = refusal(exc)
        if status == 500:
            raise exc
        page = render_template("console/error.html", status=status, code=code, message=str(exc))
        return page, status


def _register_flow_pages(bp: Blueprint, ops: Operations, viewer: Guard) -> None:
    @bp.get("/")
    def home() -> Redirect:
        return redirect(url_for(".flows"))

    @bp.get("/flows")
    @viewer
    def flows() -> str:
        query = params.list_query(request.args, default_limit=50)
        query = replace(query, filter=g.caller.narrow(_whose(query.filter, g.caller)))
        page = ops.store.summaries(query.filter, after=query.after, limit=query.limit)
        # Several labels travel as one field, spaces between (params.labels splits them).
        kept: dict[str, Any] = {
            k: v for k in FILTER_FIELDS if (v := " ".join(filter(None, request.args.getlist(k))))
        }
        if query.filter.tenant:
            kept["tenant"] = query.filter.tenant  # the one a scoped caller sees, if it named none
        return render_template(
            "console/flows.html",
            page=page,
            counts=_counts(ops, query.filter),
            statuses=list(Status),
            args=kept,
            tenants=sorted(g.caller.tenants) if g.caller.tenants is not None else None,
            next_url=url_for(".flows", **kept, cursor=page.next.encode()) if page.next else None,
            first_url=url_for(".flows", **kept) if query.after else None,
        )

    @bp.get("/flows/<flow_id>")
    @viewer
    def flow(flow_id: str) -> str:
        context = _flow_context(ops, flow_id)
        notice = NOTICES.get(request.args.get("notice", ""))
        return render_template("console/flow.html", notice=notice, **context)

    @bp.get("/definitions")
    @viewer
    def definitions_page() -> str:
        shown = definitions(ops.registry) if ops.registry is not None else []
        return render_template(
            "console/definitions.html",
            definitions=shown,
            unavailable=ops.registry is None,
            running=_running(ops),
        )

    @bp.get("/flows/<flow_id>/live")
    @viewer
    def flow_live(flow_id: str) -> str:
        """The part of a flow's page that changes while it runs (the page polls it)."""
        return render_template("console/_flow_live.html", **_flow_context(ops, flow_id))


def _whose(wanted: FlowFilter, caller: Caller) -> FlowFilter:
    """A caller scoped to several tenants who names none sees its first one's flows, the
    form's tenant field saying whose (the api asks it to name one instead)."""
    if wanted.tenant is None and caller.tenants:
        return replace(wanted, tenant=min(caller.tenants))
    return wanted


def _running(ops: Operations) -> dict[tuple[str, int], VersionUse] | None:
    """Flows not ended on each registered version (the Definitions page's versions panel);
    None for a caller scoped to tenants: the counts span them all."""
    if ops.registry is None or g.caller.scoped:
        return None
    uses = version_uses(ops.store, ops.registry, pairs(ops.registry))
    return {(u.flow, u.version): u for u in uses}


def _counts(ops: Operations, wanted: FlowFilter) -> dict[Status, int] | None:
    """How many flows ``wanted`` admits in each status; None when a count cannot ask it (more
    than one label: the page says so)."""
    try:
        return ops.store.count_by_status(wanted)
    except Uncountable:
        return None


def flow_url(endpoint: str, flow: Any, **values: Any) -> str:
    """The URL of a console page of ``flow`` (a record or a summary): its id, and its tenant
    unless it is the default one."""
    tenant = None if flow.tenant == DEFAULT_TENANT else flow.tenant
    return url_for(endpoint, flow_id=flow.flow_id, tenant=tenant, **values)


def _shown(ops: Operations, flow_id: str) -> FlowRecord:
    """The flow the URL names (``?tenant=`` says whose), if the caller may see it; FlowNotFound
    (404) as for a missing one."""
    tenant = params.tenant(request.args.get("tenant"))
    return ops.engine.find(params.flow_id(flow_id), tenant=tenant, visible=g.caller.sees)


def _flow_context(ops: Operations, flow_id: str) -> dict[str, Any]:
    stored = _shown(ops, flow_id)
    read_back, unread = _read_back(ops, stored)
    record = shown_record(read_back or stored, g.caller, ops.sealing)
    now = datetime.now(UTC)
    definition = _definition(ops, record)
    return {
        "record": record,
        # Values in the bucket show as their claim checks until the reader asks for them
        # (``?resolve=true``): each reading is a read of the bucket.
        "offloaded": payloads.offloaded(stored),
        "read_back": read_back is not None,
        "unread": unread,
        "now": now,
        # An ended flow whose clean-up runs still changes: the page keeps refreshing.
        "active": record.status in ACTIVE or record.cleaning,
        "can_cancel": record.status in ACTIVE and record.status is not Status.COMPENSATING,
        "can_retry": record.status in TERMINAL
        and record.status is not Status.SUCCEEDED
        and not record.cleaning,
        "can_undo": bool(planner.undoable(record)),
        # Whatever its definition says: the reset page's dry run says why a step cannot be.
        "can_reset": record.status in TERMINAL and not record.cleaning and not record.child_of,
        "timeline": timeline.build(
            record, definition, now=now, in_flight=ops.engine.polls_in_flight(record)
        ),
        "operator": g.caller.may(Role.OPERATOR),
        "signaller": g.caller.may(Role.SIGNALLER),
        "waiting_signals": waiting_signals(record),
        # A child's parent and a parent's children (paged, on the flows list), both ways.
        "family": family_json(record),
        "has_children": any(e.child for e in record.effects),
    }


def _read_back(ops: Operations, record: FlowRecord) -> tuple[FlowRecord | None, str]:
    """``record`` with its offloaded values read back when the page asks (``?resolve=``),
    else None; and why they could not be (too large for a page, gone, altered, the bucket
    down), shown on the page instead of failing it."""
    if not params.flag(request.args.get("resolve"), name="resolve"):
        return None, ""
    try:
        return payloads.read_back(ops.engine, record), ""
    except (params.PayloadTooLarge, PayloadMissing, PayloadCorrupt, PayloadUnavailable) as exc:
        return None, str(exc)


class Waiting(NamedTuple):
    """A step of the flow that waits for a signal now (not a ForEach item's: those are sent
    with the api or the CLI, naming the item)."""

    step: str
    names: list[str]
    until: datetime | None


def waiting_signals(record: FlowRecord) -> list[Waiting]:
    if record.status not in ACTIVE:
        return []
    return [
        Waiting(track.position.step, track.waiting_for, track.signal_until)
        for _, track in sorted(record.tracks.items())
        if track.waiting_for and track.position.scope is None
    ]


def _register_signals(bp: Blueprint, ops: Operations, signaller: Guard) -> None:
    @bp.route("/flows/<flow_id>/signals/<name>", methods=["GET", "POST"])
    @signaller
    def signal(flow_id: str, name: str) -> Any:
        """Approve, reject, or any signal a step of the flow waits for: behind a page that
        asks why (required); the caller's identity and the reason go in the history."""
        record = _shown(ops, flow_id)
        if request.method == "GET":
            return render_template("console/signal.html", record=record, name=name)
        why = params.reason(request.form.get("reason"), required=True)
        answer = ops.engine.signal(
            record.flow_id,
            name,
            {},
            by=g.caller.identity,
            reason=why,
            tenant=record.tenant,
            visible=g.caller.sees,
        )
        if answer.outcome.value == "ignored":
            page = render_template(
                "console/error.html", status=409, code=answer.code, message=answer.reason
            )
            return page, 409
        return redirect(flow_url(".flow", record, notice="signalled"), 303)


def _definition(ops: Operations, record: FlowRecord) -> Flow | None:
    if ops.registry is None:
        return None
    try:
        return ops.registry.get(record.flow, record.version)
    except UnknownFlow:
        return None


def _register_actions(bp: Blueprint, ops: Operations, operator: Guard) -> None:
    @bp.route("/flows/<flow_id>/cancel", methods=["GET", "POST"])
    @operator
    def cancel(flow_id: str) -> Any:
        record = _shown(ops, flow_id)
        if request.method == "GET":
            return _confirm(record, "cancel")
        why = params.reason(request.form.get("reason"), required=True)
        ops.engine.cancel(record.key, why, by=g.caller.identity)
        return redirect(flow_url(".flow", record, notice="cancelled"), 303)

    @bp.route("/flows/<flow_id>/retry", methods=["GET", "POST"])
    @operator
    def retry(flow_id: str) -> Any:
        record = _shown(ops, flow_id)
        if request.method == "GET":
            return _confirm(record, "retry")
        why = params.reason(request.form.get("reason"), required=True)
        ops.engine.retry(record.key, reason=why, by=g.caller.identity)
        return redirect(flow_url(".flow", record, notice="retried"), 303)

    @bp.route("/flows/<flow_id>/undo", methods=["GET", "POST"])
    @operator
    def undo(flow_id: str) -> Any:
        record = _shown(ops, flow_id)
        if request.method == "GET":
            return _confirm(record, "undo", undoable=planner.undoable(record))
        why = params.reason(request.form.get("reason"), required=True)
        ops.engine.undo(record.key, reason=why, by=g.caller.identity)
        return redirect(flow_url(".flow", record, notice="undone"), 303)


def _register_reset(bp: Blueprint, ops: Operations, operator: Guard) -> None:
    @bp.route("/flows/<flow_id>/reset", methods=["GET", "POST"])
    @operator
    def reset(flow_id: str) -> Any:
        """Reset to a step: choose the step (and whether to keep the effects), see the dry
        run, confirm with a reason; the page is its own form until then."""
        record = _shown(ops, flow_id)
        form = request.form if request.method == "POST" else request.args
        step = params.step_name(form["step"]) if form.get("step") else None
        undo = form.get("keep") != "on"
        if request.method == "GET" or step is None:
            return _reset_page(ops, record, step, undo=undo)
        why = params.reason(request.form.get("reason"), required=True)
        ops.engine.reset(record.key, step, undo=undo, reason=why, by=g.caller.identity)
        return redirect(flow_url(".flow", record, notice="reset"), 303)


def _reset_page(ops: Operations, record: FlowRecord, step: str | None, *, undo: bool) -> str:
    definition = _definition(ops, record)
    steps = list(definition.graph.order) if definition is not None else []
    preview = ops.engine.preview_reset(record.key, step, undo=undo) if step else None
    return render_template(
        "console/reset.html", record=record, steps=steps, step=step, undo=undo, preview=preview
    )


def _confirm(record: FlowRecord, action: str, **extra: Any) -> str:
    return render_template("console/confirm.html", record=record, action=action, **extra)


def _register_message_pages(bp: Blueprint, ops: Operations, viewer: Guard, operator: Guard) -> None:
    @bp.get("/rejected")
    @viewer
    def rejected() -> str:
        g.caller.unscoped("read rejected messages")
        after = params.cursor(request.args.get("cursor"))
        page = ops.store.rejected_messages(
            after=after, limit=params.limit(request.args.get("limit"))
        )
        return render_template(
            "console/rejected.html",
            page=page,
            next_url=url_for(".rejected", cursor=page.next.encode()) if page.next else None,
            first_url=url_for(".rejected") if after else None,
        )

    @bp.get("/dead-letters")
    @viewer
    def dead_letters() -> str:
        g.caller.unscoped("read dead letters")
        held = ops.dead_letters.held(limit=100)
        return render_template(
            "console/dead_letters.html",
            letters=[(m, *shown_letter(m, ops.registry)) for m in held],
            replayed=params.message_id(request.args["replayed"])
            if request.args.get("replayed")
            else None,
            started=_started(request.args),
        )

    @bp.route("/dead-letters/<message_id>/replay", methods=["GET", "POST"])
    @operator
    def replay(message_id: str) -> Any:
        g.caller.unscoped("replay dead letters")
        message_id = params.message_id(message_id)
        if request.method == "GET":
            letter = next((m for m in ops.dead_letters.held() if m.message_id == message_id), None)
            text, note = shown_letter(letter, ops.registry) if letter else ("", "")
            return render_template(
                "console/replay.html", message_id=message_id, letter=letter, text=text, note=note
            )
        edited = request.form.get("mode") == "edited"
        data = params.replay_data(request.form.get("data")) if edited else None
        why = params.reason(request.form.get("reason"), required=True)
        published = ops.dead_letters.replay(
            message_id, by=g.caller.identity, reason=why, data=data, vet=params.vet_replay
        )
        shown: dict[str, Any] = {"replayed": published, **_named(data)}
        return redirect(url_for(".dead_letters", **{k: v for k, v in shown.items() if v}), 303)


def _named(data: bytes | None) -> dict[str, str]:
    """The flow id (and tenant) an edited start message names, for a link to the flow it
    starts (``replay_data`` checked it is a start message)."""
    if data is None:
        return {}
    message = json.loads(data)
    return {k: v for k in ("flow_id", "tenant") if isinstance(v := message.get(k), str)}


class Named(NamedTuple):
    """A flow as a URL names it."""

    flow_id: str
    tenant: str


def _started(args: Any) -> Named | None:
    """The flow a replay started, from the redirect's parameters, checked like any others
    (they are the caller's to edit): None if they name none."""
    if not args.get("flow_id"):
        return None
    tenant = params.tenant(args.get("tenant"))
    return Named(params.flow_id(args["flow_id"]), tenant or DEFAULT_TENANT)


def duration(seconds: float) -> str:
    """``1.14 s``, ``2 min 5 s``, ``3 h 20 min``, ``4 d 2 h``: two units at most."""
    sign, left = ("-" if seconds < 0 else ""), abs(seconds)
    if left < 60:
        return f"{sign}{left:.2f} s"
    units = (("d", 86400), ("h", 3600), ("min", 60), ("s", 1))
    parts: list[str] = []
    for name, size in units:
        count, left = divmod(left, size)
        if count or parts:
            parts.append(f"{count:.0f} {name}")
    return sign + " ".join(parts[:2])


def _moment(at: datetime | str | None) -> datetime | None:
    """A time in UTC, from a datetime or the ISO text the tenants' and breakers' views hold."""
    if not at:
        return None
    return (datetime.fromisoformat(at) if isinstance(at, str) else at).astimezone(UTC)


def _register_filters(bp: Blueprint) -> None:
    @bp.app_template_filter("when")
    def when(at: datetime | str | None) -> str:
        moment = _moment(at)
        return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] if moment else ""

    @bp.app_template_filter("short")
    def short(at: datetime | str | None) -> str:
        moment = _moment(at)
        return moment.strftime("%m-%d %H:%M:%S") if moment else ""

    @bp.app_template_filter("seconds")
    def seconds(value: float | None) -> str:
        return "" if value is None else duration(value)

    @bp.app_template_filter("pretty")
    def pretty(value: Any) -> str:
        return json.dumps(value, indent=2, sort_keys=True, default=str)

    @bp.app_template_filter("due")
    def due(at: datetime, now: datetime) -> str:
        gap = (at - now).total_seconds()
        return f"in {duration(gap)}" if gap >= 0 else f"overdue by {duration(-gap)}"

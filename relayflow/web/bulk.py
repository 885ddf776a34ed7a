"""The api's bulk actions: act on every flow a filter matches (retry, cancel), after a dry run.

| route | role | |
|---|---|---|
| ``POST /bulk`` | operator | ``{action, filter, reason, dry_run, rate_per_s, step?, undo?}`` |
| ``GET /bulk`` | viewer | bulk actions, the newest first |
| ``GET /bulk/{id}`` | viewer | its progress: state, counts, cursor, why it waits |
| ``GET /bulk/{id}/previews?page=N`` | viewer | 100 of its flows: their previews, outcomes |
| ``POST /bulk/{id}:run``, ``:pause``, ``:resume``, ``:cancel`` | operator | ``{"reason"}`` |

``POST /bulk`` with ``"dry_run": false`` runs it at once (its dry run is stored all the same).
A caller scoped to tenants makes bulk actions over one of its tenants only (the filter is
narrowed as a list's is) and sees only those; an unscoped bulk action is an unscoped caller's.
Routes are thin: read and check the body (``params``), call one ``BulkRunner`` method.
"""

from __future__ import annotations

import math
from typing import Any

from flask import Flask, request
from werkzeug.datastructures import MultiDict

from relayflow.core.bulk import (
    CHUNK_ROWS,
    DEFAULT_RATE_PER_S,
    MAX_RATE_PER_S,
    MIN_RATE_PER_S,
    BulkKind,
    filter_json,
    filter_of,
    is_bulk_id,
    period_s,
)
from relayflow.core.bulk_runner import BulkRunner
from relayflow.core.bulk_state import BulkAction
from relayflow.core.errors import BulkNotFound
from relayflow.core.listing import FlowFilter
from relayflow.web import guard, params
from relayflow.web.access import Caller, Role
from relayflow.web.operations import Operations, caller, guarded

ACTIONS = ("run", "pause", "resume", "cancel")


def add_bulk_routes(app: Flask, ops: Operations) -> None:
    """``POST /bulk``, ``GET /bulk``, ``GET /bulk/{id}``, ``GET /bulk/{id}/previews``,
    ``POST /bulk/{id}:run`` (``:pause``, ``:resume``, ``:cancel``)."""
    viewer = guarded(ops.access, Role.VIEWER, "read bulk actions")

    @app.post("/bulk")
    @guarded(ops.access, Role.OPERATOR, "make bulk actions")
    def make_bulk() -> Any:
        body = guard.body()
        dry = params.flag(_text(body.get("dry_run", True)), name="dry_run")
        made = create(runner_of(ops), body, caller())
        if not dry:
            made = runner_of(ops).run(made.id, by=caller().identity, reason=made.reason)
        first = runner_of(ops).rows(made.id, 0)
        return {**bulk_json(made), "previews": [row.to_json() for row in first]}

    @app.get("/bulk")
    @viewer
    def list_bulk() -> Any:
        limit = params.limit(request.args.get("limit"), default=20)
        shown = [a for a in runner_of(ops).recent(limit=limit) if visible(a, caller())]
        return {"bulk": [bulk_json(a) for a in shown]}

    @app.get("/bulk/<bulk_id>")
    @viewer
    def get_bulk(bulk_id: str) -> Any:
        return bulk_json(shown_bulk(ops, bulk_id))

    @app.get("/bulk/<bulk_id>/previews")
    @viewer
    def bulk_previews(bulk_id: str) -> Any:
        action = shown_bulk(ops, bulk_id)
        page = page_param(request.args.get("page"), action)
        rows = runner_of(ops).rows(action.id, page)
        more = page + 1 < action.chunks
        return {
            "bulk_id": action.id,
            "page": page,
            "pages": action.chunks,
            "previews": [row.to_json() for row in rows],
            "next_page": page + 1 if more else None,
        }

    for name in ACTIONS:
        _action_route(app, ops, name)


def _action_route(app: Flask, ops: Operations, name: str) -> None:
    @app.post(f"/bulk/<bulk_id>:{name}", endpoint=f"{name}_bulk")
    @guarded(ops.access, Role.OPERATOR, f"{name} bulk actions")
    def act(bulk_id: str) -> Any:
        return bulk_json(change(ops, bulk_id, name, guard.body().get("reason")))


def change(ops: Operations, bulk_id: str, name: str, reason: Any) -> BulkAction:
    """An operator's ``name`` (run, pause, resume, cancel) of a bulk action they may see;
    a reason is required to cancel it."""
    action = shown_bulk(ops, bulk_id)
    why = params.reason(reason, required=name == "cancel")
    runner = runner_of(ops)
    acts = {"run": runner.run, "pause": runner.pause, "resume": runner.resume}
    act = acts.get(name, runner.cancel)
    return act(action.id, by=caller().identity, reason=why)


def create(runner: BulkRunner, body: dict[str, Any], who: Caller) -> BulkAction:
    """The dry run a ``POST /bulk`` body asks for, its filter narrowed to ``who``'s tenants."""
    action = bulk_kind(body.get("action"))
    wanted = who.narrow(bulk_filter(body.get("filter")))
    reason = params.reason(body.get("reason"), required=True)
    rate = rate_param(body.get("rate_per_s"))
    step, undo = reset_params(action, body)
    return runner.create(
        action, wanted, reason=reason, by=who.identity, rate_per_s=rate, step=step, undo=undo
    )


def reset_params(action: BulkKind, body: dict[str, Any]) -> tuple[str | None, bool]:
    """A reset's ``step`` (required) and ``undo`` (default true); neither for another action."""
    if action is not BulkKind.RESET:
        if body.get("step") is not None or body.get("undo") is not None:
            raise params.BadRequest(f"step and undo are a reset's; a {action} takes neither")
        return None, True
    undo = params.boolean(body.get("undo"), name="undo", default=True)
    return params.step_name(body.get("step")), undo


def runner_of(ops: Operations) -> BulkRunner:
    if ops.bulk is None:
        raise BulkNotFound("this deployment runs no bulk actions")
    return ops.bulk


def shown_bulk(ops: Operations, bulk_id: str) -> BulkAction:
    """The bulk action, if the caller may see it; BulkNotFound (404) as for a missing one."""
    if not is_bulk_id(bulk_id):
        raise params.BadRequest("a bulk action's id is bulk- and 12 hex digits")
    action = runner_of(ops).get(bulk_id)
    if not visible(action, caller()):
        raise BulkNotFound(f"no bulk action {bulk_id!r}")
    return action


def visible(action: BulkAction, who: Caller) -> bool:
    """Whether ``who`` sees ``action``: one over a tenant, a caller of that tenant; one over
    every tenant, an unscoped caller."""
    if action.tenant is None:
        return who.tenants is None
    return who.sees(action.tenant)


def bulk_kind(raw: Any) -> BulkKind:
    try:
        return BulkKind(raw)
    except ValueError:
        kinds = ", ".join(k.value for k in BulkKind)
        shown = str(raw)[:40] if raw is not None else "nothing"
        raise params.BadRequest(f"action must be one of {kinds}, not {shown!r}") from None


def bulk_filter(raw: Any) -> FlowFilter:
    """A bulk action's filter: a JSON object of the list's filters (``GET /flows``'s; ``label``
    a ``key=value`` or a list of them), each checked as there; at least one, so no bulk action
    takes every flow by an oversight."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise params.BadRequest("filter must be a JSON object of the list's filters")
    unknown = sorted(set(raw) - set(params.FILTER_FIELDS))
    if unknown:
        raise params.BadRequest(
            f"filter: no filter {unknown[0][:40]!r} (filters: {', '.join(params.FILTER_FIELDS)})"
        )
    wanted = params.flow_filter(MultiDict(_texts(raw)))
    if wanted == FlowFilter():
        raise params.BadRequest(
            "filter: name at least one (a flow, a status, a time range...): a bulk action "
            "over every flow is never what an operator meant"
        )
    return wanted


def rate_param(raw: Any) -> float:
    if raw is None or raw == "":
        return DEFAULT_RATE_PER_S
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise params.BadRequest("rate_per_s must be a number of flows a second")
    try:
        rate = float(raw)
    except ValueError:
        rate = math.nan
    if not MIN_RATE_PER_S <= rate <= MAX_RATE_PER_S:
        raise params.BadRequest(
            f"rate_per_s must be {MIN_RATE_PER_S:g}..{MAX_RATE_PER_S:g} flows a second, "
            f"got {str(raw)[:40]!r}"
        )
    return rate


def page_param(raw: str | None, action: BulkAction) -> int:
    last = max(0, action.chunks - 1)
    if raw is None or raw == "":
        return 0
    if not params.SMALL_NUMBER.fullmatch(raw) or int(raw) > last:
        raise params.BadRequest(f"page must be 0..{last} ({CHUNK_ROWS} flows a page)")
    return int(raw)


def bulk_json(action: BulkAction) -> dict[str, Any]:
    """A bulk action as the api, the CLI and the console show it: its document, its filter
    readable, and what follows from it (remaining flows, progress, time left at its rate)."""
    doc = action.model_dump(mode="json", exclude={"filter"})
    remaining = max(0, action.matched - action.settled)
    pace = period_s(action.rate_per_s, action.batch_size)
    batches_left = action.batches - action.next_batch
    return {
        **doc,
        "filter": filter_json(filter_of(action.filter)),
        "batches": action.batches,
        "remaining": remaining,
        "progress": round(action.settled / action.matched, 4) if action.matched else 1.0,
        "eta_s": round(batches_left * pace, 1) if action.state.value == "running" else None,
    }


def _texts(raw: dict[str, Any]) -> list[tuple[str, str]]:
    """A filter object as a query's parameters: ``label`` may be a list (all of them)."""
    found = []
    for key, value in raw.items():
        for each in value if key == "label" and isinstance(value, list) else [value]:
            if each not in (None, ""):
                found.append((key, _text(each)))
    return found


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else str(value)

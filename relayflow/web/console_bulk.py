"""The console's bulk actions: a form with the list's filters and the action (retry, cancel,
or reset to a step), whose dry run lists each matching flow and what the action would do to
it (steps run again, effects undone and kept), then a confirmation that asks why, and the
run's progress, live.

The same ``BulkRunner`` calls as the api (``relayflow.web.bulk``), behind the same roles:
viewers read bulk actions, operators make, run, pause, resume and cancel them.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, g, redirect, render_template, request, url_for

from relayflow.core.bulk import BulkKind
from relayflow.core.state import Status
from relayflow.web import params
from relayflow.web.access import Role
from relayflow.web.bulk import (
    ACTIONS,
    bulk_json,
    change,
    create,
    page_param,
    runner_of,
    shown_bulk,
    visible,
)
from relayflow.web.operations import Operations, guarded

NOTICES = {
    "run": "Run recorded: its flows are acted on in batches, at its pace.",
    "pause": "Pause recorded: it stops after the batch under way.",
    "resume": "Resume recorded: it goes on from its next batch.",
    "cancel": "Cancel recorded: what it did stays done; the flows it did not reach are left.",
}


def register(bp: Blueprint, ops: Operations) -> None:
    """``/console/bulk`` (the form and the list), ``/console/bulk/{id}`` (the dry run and the
    progress), ``/console/bulk/{id}/live`` and ``/console/bulk/{id}/{run|pause|resume|cancel}``."""
    viewer = guarded(ops.access, Role.VIEWER, "read bulk actions")
    operator = guarded(ops.access, Role.OPERATOR, "make or run bulk actions")

    @bp.get("/bulk")
    @viewer
    def bulk() -> str:
        shown = [a for a in runner_of(ops).recent(limit=20) if visible(a, g.caller)]
        return render_template(
            "console/bulk.html",
            actions=[bulk_json(a) for a in shown],
            kinds=[k.value for k in BulkKind],
            statuses=list(Status),
            form={},
        )

    @bp.post("/bulk")
    @operator
    def make_bulk() -> Any:
        form = request.form
        body: dict[str, Any] = {
            "action": form.get("action"),
            "filter": {k: v for k in params.FILTER_FIELDS if (v := form.get(k))},
            "reason": form.get("reason"),
            "rate_per_s": form.get("rate_per_s"),
        }
        if body["action"] == BulkKind.RESET.value:  # the step to reset to, and its undo
            body |= {"step": form.get("step"), "undo": form.get("keep_effects") != "on"}
        made = create(runner_of(ops), body, g.caller)
        return redirect(url_for(".bulk_action", bulk_id=made.id), 303)

    @bp.get("/bulk/<bulk_id>")
    @viewer
    def bulk_action(bulk_id: str) -> str:
        action = shown_bulk(ops, bulk_id)
        page = page_param(request.args.get("page"), action)
        return render_template(
            "console/bulk_action.html",
            bulk=bulk_json(action),
            rows=[row.to_json() for row in runner_of(ops).rows(action.id, page)],
            page=page,
            notice=NOTICES.get(request.args.get("notice", "")),
            operator=g.caller.may(Role.OPERATOR),
        )

    @bp.get("/bulk/<bulk_id>/live")
    @viewer
    def bulk_live(bulk_id: str) -> str:
        """The part of a bulk action's page that changes while it runs (the page polls it)."""
        return render_template("console/_bulk_live.html", bulk=bulk_json(shown_bulk(ops, bulk_id)))

    @bp.post("/bulk/<bulk_id>/<name>")
    @operator
    def bulk_change(bulk_id: str, name: str) -> Any:
        if name not in ACTIONS:
            raise params.BadRequest(f"a bulk action is {', '.join(ACTIONS)}, not {name[:40]!r}")
        reason = request.form.get("reason")
        if name == "run":  # confirmed with a reason, recorded with the caller
            reason = params.reason(reason, required=True)
        done = change(ops, bulk_id, name, reason)
        return redirect(url_for(".bulk_action", bulk_id=done.id, notice=name), 303)

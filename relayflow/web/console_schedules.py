"""The console's schedules page: each schedule's cron, zone and policies, its next ticks (in
its zone and UTC), its last runs linked to their flows, and, for operators, pause, resume and
trigger behind a confirmation page that asks why (the same form and guard as cancel)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, g, redirect, render_template, request, url_for

from relayflow.web import params
from relayflow.web.access import Role
from relayflow.web.operations import Operations, guarded
from relayflow.web.schedules import schedule_name, scheduler_of

ACTIONS = {
    "pause": "Pause recorded: none of its ticks start until it is resumed.",
    "resume": "Resume recorded: its next tick starts its flow (the pause's are not caught up).",
    "trigger": "Trigger recorded: its flow has started.",
}


def register(bp: Blueprint, ops: Operations) -> None:
    """``/console/schedules`` and ``/console/schedules/{name}/{pause|resume|trigger}``."""
    viewer = guarded(ops.access, Role.VIEWER, "read schedules", unscoped=True)
    operator = guarded(ops.access, Role.OPERATOR, "pause, resume or trigger schedules")

    @bp.get("/schedules")
    @viewer
    def schedules() -> str:
        views = ops.scheduler.views() if ops.scheduler is not None else []
        notice = ACTIONS.get(request.args.get("notice", ""))
        started = request.args.get("started")
        return render_template(
            "console/schedules.html",
            schedules=views,
            notice=notice,
            started=params.flow_id(started) if started else None,
        )

    @bp.route("/schedules/<name>/<action>", methods=["GET", "POST"])
    @operator
    def schedule_action(name: str, action: str) -> Any:
        g.caller.unscoped(f"{action} schedules")
        if action not in ACTIONS:
            raise params.BadRequest(f"a schedule is paused, resumed or triggered, not {action!r}")
        scheduler = scheduler_of(ops)
        schedule = scheduler.schedule(schedule_name(name))
        if request.method == "GET":
            return render_template(
                "console/schedule_confirm.html", schedule=schedule, action=action
            )
        why = params.reason(request.form.get("reason"), required=True)
        who = g.caller.identity
        if action == "trigger":
            run = scheduler.trigger(schedule.name, by=who, reason=why)
            return redirect(url_for(".schedules", notice=action, started=run.flow_id), 303)
        change = scheduler.pause if action == "pause" else scheduler.resume
        change(schedule.name, by=who, reason=why)
        return redirect(url_for(".schedules", notice=action), 303)

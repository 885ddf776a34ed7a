"""The api's schedules routes: list them (viewer), pause, resume and trigger one (operator).

Schedules belong to the deployment, not to a tenant: a caller scoped to tenants may not read
or operate them (``unscoped``). Each write records the caller and the reason on the
schedule's document; a trigger's run is listed with them.
"""

from __future__ import annotations

import re
from typing import Any

from flask import Flask

from relayflow.core.errors import UnknownSchedule
from relayflow.core.schedule_state import ScheduleRun, ScheduleState
from relayflow.core.scheduler import Scheduler
from relayflow.core.schedules import SCHEDULE_NAME_PATTERN
from relayflow.web import guard, params
from relayflow.web.access import Role
from relayflow.web.operations import Operations, caller, guarded


def add_schedule_routes(app: Flask, ops: Operations) -> None:
    """``GET /schedules``; ``POST /schedules/{name}:pause``, ``:resume``, ``:trigger``."""

    @app.get("/schedules")
    @guarded(ops.access, Role.VIEWER, "read schedules", unscoped=True)
    def list_schedules() -> Any:
        views = ops.scheduler.views() if ops.scheduler is not None else []
        return {"schedules": views}

    @app.post("/schedules/<name>:trigger")
    @guarded(ops.access, Role.OPERATOR, "trigger schedules", unscoped=True)
    def trigger_schedule(name: str) -> Any:
        body = guard.body()
        why = params.reason(body.get("reason"), required=True)
        flow_id = params.flow_id(str(body["flow_id"])) if body.get("flow_id") else None
        run = scheduler_of(ops).trigger(
            schedule_name(name), by=caller().identity, reason=why, flow_id=flow_id
        )
        return {"schedule": name, **run_json(run)}

    for action in ("pause", "resume"):
        _pause_route(app, ops, action)


def _pause_route(app: Flask, ops: Operations, action: str) -> None:
    @app.post(f"/schedules/<name>:{action}", endpoint=f"{action}_schedule")
    @guarded(ops.access, Role.OPERATOR, f"{action} schedules", unscoped=True)
    def act(name: str) -> Any:
        why = params.reason(guard.body().get("reason"), required=True)
        scheduler = scheduler_of(ops)
        change = scheduler.pause if action == "pause" else scheduler.resume
        return state_json(change(schedule_name(name), by=caller().identity, reason=why))


def scheduler_of(ops: Operations) -> Scheduler:
    if ops.scheduler is None:
        raise UnknownSchedule("this deployment runs no schedules")
    return ops.scheduler


def schedule_name(text: str) -> str:
    if not re.fullmatch(SCHEDULE_NAME_PATTERN, text):
        raise params.BadRequest(f"a schedule name must match {SCHEDULE_NAME_PATTERN}")
    return text


def state_json(state: ScheduleState) -> dict[str, Any]:
    return {"schedule": state.name, "paused": state.paused, "by": state.by, "reason": state.reason}


def run_json(run: ScheduleRun) -> dict[str, Any]:
    return {"flow_id": run.flow_id, "outcome": run.outcome, "note": run.note, "by": run.by}

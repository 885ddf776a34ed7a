"""The console's tenants page: each tenant's quota and its use (flows running against
``max_running``), the flows waiting for admission, its priority and start rate, and whether it
is paused (by whom, why, since when); operators pause and resume a tenant behind a
confirmation page that asks why (the same form and guard as cancel), with the engine calls
the api's ``POST /tenants/{t}:pause`` makes. A caller scoped to tenants sees and acts on its
own only: to it another tenant does not exist."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, g, redirect, render_template, request, url_for

from relayflow.core.errors import UnknownTenant
from relayflow.web import params
from relayflow.web.access import Role
from relayflow.web.operations import Operations, guarded, tenants_seen

ACTIONS = {
    "pause": "Pause recorded: its tasks are put off (no attempt spent) and none of its waiting "
    "flows is admitted until it is resumed.",
    "resume": "Resume recorded: its flows go on where they were ({brought} put-off tasks "
    "brought forward now), and its waiting flows are admitted as its quota allows.",
}


def register(bp: Blueprint, ops: Operations) -> None:
    """``/console/tenants`` and ``/console/tenants/{tenant}/{pause|resume}``."""
    viewer = guarded(ops.access, Role.VIEWER, "read tenants")
    operator = guarded(ops.access, Role.OPERATOR, "pause or resume tenants")

    @bp.get("/tenants")
    @viewer
    def tenants() -> str:
        action = request.args.get("notice", "")
        brought = request.args.get("brought", "")
        notice = ACTIONS.get(action)
        return render_template(
            "console/tenants.html",
            tenants=tenants_seen(ops, g.caller),
            notice=notice.format(brought=int(brought) if brought.isdigit() else 0)
            if notice
            else None,
            changed=params.tenant(request.args.get("tenant")) if action in ACTIONS else None,
        )

    @bp.route("/tenants/<tenant>/<action>", methods=["GET", "POST"])
    @operator
    def tenant_action(tenant: str, action: str) -> Any:
        if action not in ACTIONS:
            raise params.BadRequest(f"a tenant is paused or resumed, not {action!r}")
        shown = tenant_view(ops, tenant)
        if request.method == "GET":
            return render_template("console/tenant_confirm.html", tenant=shown, action=action)
        why = params.reason(request.form.get("reason"), required=True)
        name = shown["tenant"]
        if action == "pause":
            ops.engine.pause_tenant(name, by=g.caller.identity, reason=why)
            return redirect(url_for(".tenants", notice=action, tenant=name), 303)
        resumed = ops.engine.resume_tenant(name, by=g.caller.identity, reason=why)
        brought = resumed.brought_forward
        return redirect(url_for(".tenants", notice=action, tenant=name, brought=brought), 303)


def tenant_view(ops: Operations, raw: str) -> dict[str, Any]:
    """The view of the tenant a URL names, if the caller may see it; UnknownTenant (404) for
    one with no policy and no operator's state, as for one the caller may not see."""
    name = params.tenant(raw)
    assert name is not None  # a route segment is never empty
    found = ops.engine.tenant_view(name) if g.caller.sees(name) else None
    if found is None:
        raise UnknownTenant(
            f"no tenant {name!r}: the tenants are the default one and those named in "
            "RELAYFLOW_TENANTS (see the tenants page)"
        )
    return found

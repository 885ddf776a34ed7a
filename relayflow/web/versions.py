"""``GET /versions``: each flow version the deployed app registers, and how many flows not
ended run on it — what ``relayflow versions check`` compares with the app about to be deployed
(``cloudbuild.yaml`` runs it before every deploy), what ``relayflow drain`` waits on, and the
console's Definitions page shows.

``flow=NAME`` narrows it to one flow's versions; ``flow=NAME&version=N`` counts that one
version, registered or not (a version an earlier deploy dropped may still have flows). Counts
span tenants: a caller scoped to tenants may not read them (``unscoped``).
"""

from __future__ import annotations

from typing import Any

from flask import Flask, request

from relayflow.core.flows import Registry
from relayflow.core.versions import pairs, version_uses
from relayflow.web import params
from relayflow.web.access import Role
from relayflow.web.operations import Operations, guarded
from relayflow.web.services import error


def add_version_routes(app: Flask, ops: Operations) -> None:
    """``GET /versions[?flow=NAME[&version=N]]``, for viewers who see every tenant."""

    @app.get("/versions")
    @guarded(ops.access, Role.VIEWER, "read how many flows run on each version", unscoped=True)
    def list_versions() -> Any:
        if ops.registry is None:
            return error(503, "UNAVAILABLE", "this api was started without the app's registry")
        asked = asked_pairs(ops.registry, request.args)
        if asked is None:
            known = ", ".join(ops.registry.names()) or "none"
            name = request.args.get("flow")
            return error(404, "NOT_FOUND", f"no flow is named {name!r}; the flows are {known}")
        uses = version_uses(ops.store, ops.registry, asked)
        return {"versions": [u.to_json() for u in uses]}


def asked_pairs(registry: Registry, args: Any) -> list[tuple[str, int]] | None:
    """The (flow, version) pairs a request asks about; None for a flow the app does not
    register, asked without a version."""
    flow = params.flow_name(args.get("flow"))
    version = params.version(args.get("version"))
    if version is not None:
        if flow is None:
            raise params.BadRequest("version needs flow: name the flow the version is of")
        return [(flow, version)]
    if flow is not None and flow not in registry:
        return None
    return pairs(registry, flow)


__all__ = ["add_version_routes", "asked_pairs"]

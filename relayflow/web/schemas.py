"""The published contracts: ``GET /schemas``, ``GET /schemas/{name}`` (the JSON Schemas of
the messages, ``relayflow.schemas``, for publishers and subscribers in any language) and
``GET /definitions`` (each registered flow's steps and the schemas of its input and output)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from flask import Flask, Response, request

from relayflow.core.definitions import definitions
from relayflow.core.flows import Registry
from relayflow.schemas import SCHEMAS
from relayflow.web.services import error

Guard = Callable[[Callable[..., Any]], Callable[..., Any]]


def add_schema_routes(app: Flask, viewer: Guard) -> None:
    """The schema routes, for viewers: the files are the committed ones, as released."""

    @app.get("/schemas")
    @viewer
    def list_schemas() -> Any:
        return {
            "schemas": [
                {
                    "name": p.name,
                    "version": p.version,
                    "title": p.title,
                    "where": p.where,
                    "id": p.committed()["$id"],
                    "url": f"/schemas/{p.name}",
                }
                for p in SCHEMAS.values()
            ]
        }

    @app.get("/schemas/<name>")
    @viewer
    def get_schema(name: str) -> Any:
        published = SCHEMAS.get(name)
        if published is None:
            known = ", ".join(sorted(SCHEMAS))
            return error(404, "NOT_FOUND", f"no schema is named {name!r}; the schemas are {known}")
        body = json.dumps(published.committed(), indent=2)
        return Response(body, mimetype="application/schema+json")


def add_definition_routes(app: Flask, registry: Registry | None, viewer: Guard) -> None:
    """``GET /definitions[?flow=NAME]``: every registered version of every flow (of one)."""

    @app.get("/definitions")
    @viewer
    def list_definitions() -> Any:
        if registry is None:
            return error(503, "UNAVAILABLE", "this api was started without the app's registry")
        name = request.args.get("flow")
        if name is not None and name not in registry:
            known = ", ".join(registry.names()) or "none"
            return error(404, "NOT_FOUND", f"no flow is named {name!r}; the flows are {known}")
        shown = [d for d in definitions(registry) if name is None or d["flow"] == name]
        return {"definitions": shown}


__all__ = ["add_definition_routes", "add_schema_routes"]

"""``GET /schemas`` and ``GET /schemas/{name}``: the published JSON Schemas of the messages
(``relayflow.schemas``), for publishers and subscribers written in any language."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from flask import Flask, Response

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


__all__ = ["add_schema_routes"]

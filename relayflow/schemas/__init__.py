"""The published JSON Schemas of relayflow's messages, for publishers and subscribers in any
language: the start message (``flow-requests``), the result event (``flow-results``), the
signal message (``flow-signals``).

Each schema is generated from the pydantic model relayflow itself validates or builds with, and
committed beside this module as ``NAME.vN.json`` (package data, served by the api at
``GET /schemas/NAME``). ``python -m relayflow.schemas --write`` regenerates the files; a test
fails when a committed file differs from its model. A version changes only when a message
changes in a way an old reader or writer would get wrong (a field removed, renamed or made
required); new optional fields keep it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from relayflow.core.messages import StartMessage
from relayflow.core.result_events import ResultEvent
from relayflow.core.signal_messages import SignalMessage

HERE = Path(__file__).parent
# Names, not addresses: nothing fetches them (a reader has the file, or the api serves it).
ID_BASE = "urn:relayflow:schema:"


@dataclass(frozen=True)
class Published:
    """One published schema: its name, version, what it describes and its model."""

    name: str
    version: int
    title: str
    where: str
    model: type[BaseModel]

    @property
    def file_name(self) -> str:
        return f"{self.name}.v{self.version}.json"

    @property
    def path(self) -> Path:
        return HERE / self.file_name

    def generated(self) -> dict[str, Any]:
        """The schema as the model says it is now."""
        schema = self.model.model_json_schema()
        return {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"{ID_BASE}{self.name}:v{self.version}",
            **schema,
            "title": self.title,
            "x-relayflow": {"name": self.name, "version": self.version, "where": self.where},
        }

    def committed(self) -> dict[str, Any]:
        """The schema as the committed file says it is (what the api serves)."""
        loaded: dict[str, Any] = json.loads(self.path.read_text(encoding="utf-8"))
        return loaded


SCHEMAS: dict[str, Published] = {
    p.name: p
    for p in (
        Published(
            "start-message",
            1,
            "relayflow start message",
            "the data of a message published on flow-requests (or a tenant's own topic)",
            StartMessage,
        ),
        Published(
            "result-event",
            1,
            "relayflow result event",
            "the data of a message relayflow publishes on flow-results when a flow ends",
            ResultEvent,
        ),
        Published(
            "signal-message",
            1,
            "relayflow signal message",
            "the data of a message on flow-signals that signals a flow by its id",
            SignalMessage,
        ),
    )
}


def render(schema: dict[str, Any]) -> str:
    """A schema file's text: stable key order and indentation, so a diff shows a change."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


__all__ = ["SCHEMAS", "Published", "render"]

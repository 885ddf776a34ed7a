"""A registered flow's published contract: its steps, and the JSON Schemas of its input and its
output (from its ``input_model`` and ``output_model``), as the api (``GET /definitions``), the
CLI (``relayflow graph --schema``) and the console show them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from relayflow.core.flows import Flow, Registry
from relayflow.core.kinds import REGISTRY, Kinds


def schema_of(model: type[BaseModel] | None) -> dict[str, Any] | None:
    """The JSON Schema (draft 2020-12) of ``model``, or None for a flow that declares none."""
    return None if model is None else model.model_json_schema()


def definition(flow: Flow, *, newest: bool, kinds: Kinds = REGISTRY) -> dict[str, Any]:
    """One version of a flow, as JSON: name, version, whether new starts take it, its steps
    (each one's kind, label and what it runs after) and its input and output schemas."""
    return {
        "flow": flow.name,
        "version": flow.version,
        "newest": newest,
        "description": flow.description,
        "steps": [
            {
                "name": step.name,
                "kind": kinds.of(step).name,
                "label": kinds.of(step).describe(step),
                "after": list(flow.graph.deps[step.name]),
            }
            for step in flow.steps
        ],
        "input_schema": schema_of(flow.input_model),
        "output_schema": schema_of(flow.output_model),
    }


def definitions(registry: Registry, *, kinds: Kinds = REGISTRY) -> list[dict[str, Any]]:
    """Every registered version of every flow, by name then version."""
    return [
        definition(flow, newest=flow.version == registry.versions(flow.name)[-1], kinds=kinds)
        for flow in registry
    ]


__all__ = ["definition", "definitions", "schema_of"]

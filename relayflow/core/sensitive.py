"""Sensitive fields: which values of a flow are sealed before they are stored (see
``core.sealing``), shown redacted, and scrubbed from what is logged.

A flow marks them in its models or by path:

    class Card(BaseModel):
        number: Annotated[str, Sensitive]
        cvc: str = Field(json_schema_extra={"sensitive": True})

    Flow("payment", steps, input_model=Payment, sensitive=("outputs.authorize.token",))

A path is dot-separated: ``input.<field>...`` (the start input) or ``outputs.<step>.<field>...``
(a step's output, the flow's result being the output of its last steps); ``*`` stands for
any key of an object or any item of a list. ``output_model`` marks the outputs of the steps
that make the result. Every path is checked when the flow is defined.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import core_schema

from relayflow.core.errors import ConfigError

# A sensitive path as segments: ("input", "card", "number"), ("outputs", "charge", "token").
Path = tuple[str, ...]
ANY = "*"
ROOTS = ("input", "outputs")
# The deepest a marked path reaches (a flow document nests 20 levels at most).
MAX_SEGMENTS = 16
# How deep a model is followed for marks (a recursive model would never end).
_MAX_MODEL_DEPTH = 8


class _SensitiveMarker:
    """The type of ``Sensitive``: pydantic metadata that marks a field, and says so in the
    field's JSON Schema (``"sensitive": true``), which ``GET /definitions`` publishes."""

    def __repr__(self) -> str:
        return "Sensitive"

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: Any
    ) -> dict[str, Any]:
        shown: dict[str, Any] = handler(schema)
        shown["sensitive"] = True
        return shown


# ``Annotated[str, Sensitive]``: a field of a flow's input or output model that is sealed
# before it is stored and shown redacted (see the module docstring).
Sensitive = _SensitiveMarker()


def parse(text: str) -> Path:
    """A path as written (``"input.card.number"``) as segments; ConfigError saying what is
    wrong with it."""
    if not isinstance(text, str):
        raise ConfigError(f"a sensitive path is a string, not {type(text).__name__}")
    segments = tuple(text.split("."))
    if segments[0] not in ROOTS:
        raise ConfigError(
            f"sensitive path {text!r} starts with 'input.' or 'outputs.<step>.', "
            f"not {segments[0]!r}"
        )
    least = 2 if segments[0] == "input" else 3
    if len(segments) < least or not all(segments) or len(segments) > MAX_SEGMENTS:
        raise ConfigError(
            f"sensitive path {text!r} names a field inside "
            + ("the input (input.<field>...)" if least == 2 else "a step's output")
            + f", each part non-empty, at most {MAX_SEGMENTS} parts"
        )
    return segments


def compiled(
    flow: str,
    paths: Iterable[str],
    *,
    steps: Sequence[str],
    sinks: Sequence[str],
    input_model: type[BaseModel] | None,
    output_model: type[BaseModel] | None,
) -> tuple[Path, ...]:
    """Every sensitive path of a flow: those it names, those its models mark; ConfigError for
    a path that names no step of the flow."""
    found: list[Path] = []
    for text in paths:
        path = parse(text)
        if path[0] == "outputs" and path[1] not in steps:
            raise ConfigError(
                f"flow {flow!r}: sensitive path {text!r} names no step of the flow "
                f"(its steps: {', '.join(steps)})"
            )
        found.append(path)
    if input_model is not None:
        found += [("input", *p) for p in marked(input_model)]
    if output_model is not None:
        found += _result_paths(marked(output_model), sinks)
    return tuple(dict.fromkeys(found))


def _result_paths(paths: list[Path], sinks: Sequence[str]) -> list[Path]:
    """What ``output_model``'s marks mark: the output of each step the result is made of (the
    result of a flow with several last steps names each: its marks start with a step)."""
    found = [("outputs", sink, *p) for sink in sinks for p in paths]
    found += [("outputs", *p) for p in paths if len(p) > 1 and p[0] in sinks]
    return found


def marked(model: type[BaseModel], depth: int = 0) -> list[Path]:
    """The paths of ``model``'s fields marked sensitive (``Sensitive`` or
    ``json_schema_extra={"sensitive": True}``), following nested models, lists and dicts."""
    if depth > _MAX_MODEL_DEPTH:
        return []
    found: list[Path] = []
    for name, info in model.model_fields.items():
        key = info.alias or name
        if _is_marked(info):
            found.append((key,))
            continue
        for inner, prefix in _models_in(info.annotation):
            found += [(key, *prefix, *p) for p in marked(inner, depth + 1)]
    return found


def _is_marked(info: FieldInfo) -> bool:
    if any(isinstance(m, _SensitiveMarker) for m in info.metadata):
        return True
    extra = info.json_schema_extra
    return isinstance(extra, dict) and extra.get("sensitive") is True


def _models_in(annotation: Any, prefix: Path = ()) -> Iterator[tuple[type[BaseModel], Path]]:
    """The models a field's type holds, each with the path from the field to it (``*`` for a
    list's items or a dict's values)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation, prefix
        return
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        yield from _models_in(args[0], prefix)
    elif origin in (typing.Union, types.UnionType):
        for arg in args:
            yield from _models_in(arg, prefix)
    elif origin in (list, tuple, set, frozenset, Sequence):
        for arg in args:
            if arg is not Ellipsis:
                yield from _models_in(arg, (*prefix, ANY))
    elif origin is dict and len(args) == 2:
        yield from _models_in(args[1], (*prefix, ANY))


def under(paths: Iterable[Path], base: Path) -> list[Path]:
    """What of ``paths`` lies under ``base`` (a ``*`` in a path matches any segment there),
    relative to it: the marks of one value, e.g. of ``("outputs", "charge")``."""
    found = []
    for path in paths:
        if len(path) > len(base) and all(p in (ANY, b) for p, b in zip(path, base, strict=False)):
            found.append(path[len(base) :])
    return found


def text(path: Path) -> str:
    """A path as written: ``input.card.number``."""
    return ".".join(path)

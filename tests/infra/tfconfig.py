"""Read infra/terraform with python-hcl2: one ``Config`` per directory (a module or an env root).

Terraform itself cannot load these directories here (the google provider cannot be downloaded),
so the tests read the HCL and check structure, references and policy directly.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import hcl2
from hcl2 import SerializationOptions

REPO = Path(__file__).resolve().parents[2]
TERRAFORM = REPO / "infra" / "terraform"
MODULES = TERRAFORM / "modules"
ENVS = TERRAFORM / "envs"
BOOTSTRAP = TERRAFORM / "bootstrap"
TOPOLOGY_FILE = REPO / "relayflow" / "topology.json"

_OPTIONS = SerializationOptions(with_comments=False, strip_string_quotes=True)
_META = "__is_block__"


@dataclass(frozen=True)
class Block:
    """A labelled block: ``resource "TYPE" "NAME"``, ``variable "NAME"``, ``module "NAME"``..."""

    kind: str
    type: str
    name: str
    body: dict[str, Any]
    file: Path

    @property
    def address(self) -> str:
        return f"{self.type}.{self.name}" if self.type else f"{self.kind}.{self.name}"


@dataclass
class Config:
    """Everything declared in one directory of .tf files."""

    path: Path
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    resources: list[Block] = field(default_factory=list)
    data: list[Block] = field(default_factory=list)
    variables: dict[str, Block] = field(default_factory=dict)
    outputs: dict[str, Block] = field(default_factory=dict)
    modules: dict[str, Block] = field(default_factory=dict)
    locals: dict[str, Any] = field(default_factory=dict)
    terraform: list[dict[str, Any]] = field(default_factory=list)
    providers: list[Block] = field(default_factory=list)
    checks: list[Block] = field(default_factory=list)

    def resources_of(self, type_: str) -> list[Block]:
        return [r for r in self.resources if r.type == type_]

    def resource(self, type_: str, name: str) -> Block:
        (found,) = [r for r in self.resources if r.type == type_ and r.name == name]
        return found


def _labelled(entries: list[dict[str, Any]], kind: str, file: Path) -> Iterator[Block]:
    """Blocks with two labels (resource, data) or one (variable, output, module, provider)."""
    for entry in entries:
        for label, inner in entry.items():
            if kind in ("resource", "data"):
                for name, body in inner.items():
                    if name != _META:
                        yield Block(kind, label, name, body, file)
            else:
                yield Block(kind, "", label, inner, file)


@cache
def load(path: Path) -> Config:
    """Parse every .tf file of ``path`` (not its subdirectories)."""
    config = Config(path)
    for tf in sorted(path.glob("*.tf")):
        with tf.open(encoding="utf-8") as handle:
            doc = hcl2.load(handle, serialization_options=_OPTIONS)
        config.files[tf.name] = doc
        config.resources += _labelled(doc.get("resource", []), "resource", tf)
        config.data += _labelled(doc.get("data", []), "data", tf)
        config.providers += _labelled(doc.get("provider", []), "provider", tf)
        config.checks += _labelled(doc.get("check", []), "check", tf)
        for kind, target in (
            ("variable", config.variables),
            ("output", config.outputs),
            ("module", config.modules),
        ):
            target.update((b.name, b) for b in _labelled(doc.get(kind, []), kind, tf))
        for block in doc.get("locals", []):
            config.locals.update((k, v) for k, v in block.items() if k != _META)
        config.terraform += doc.get("terraform", [])
    return config


def module_dirs() -> list[Path]:
    return sorted(p for p in MODULES.iterdir() if p.is_dir())


def env_dirs() -> list[Path]:
    return sorted(p for p in ENVS.iterdir() if p.is_dir())


def root_dirs() -> list[Path]:
    """Directories terraform init/apply runs in: the environments and the bootstrap."""
    return [*env_dirs(), BOOTSTRAP]


def all_dirs() -> list[Path]:
    return module_dirs() + root_dirs()


def topology() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(TOPOLOGY_FILE.read_text(encoding="utf-8"))
    return data


def strings(value: Any) -> Iterator[str]:
    """Every string in a parsed HCL value (attribute values, expressions, keys)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, inner in value.items():
            yield key
            yield from strings(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from strings(inner)


def blocks(body: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """The nested blocks ``name`` of a block body (empty if none)."""
    found = body.get(name, [])
    return [b for b in found if isinstance(b, dict)]


def only_block(body: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = blocks(body, name)
    return found


def nested_blocks(body: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, body) of each nested block of ``body``, recursively, including dynamic content."""
    for key, value in body.items():
        if isinstance(value, list) and value and all(_is_block(v) for v in value):
            for inner in value:
                yield key, inner
                yield from nested_blocks(inner)


def _is_block(value: Any) -> bool:
    return isinstance(value, dict) and value.get(_META) is True


def references(expr: str, prefix: str) -> set[str]:
    """Names referenced as ``prefix.NAME`` in an expression, e.g. references(e, "var")."""
    return set(re.findall(rf"(?<![\w.]){re.escape(prefix)}\.([A-Za-z_][\w-]*)", expr))


def object_type_attributes(type_expr: str) -> set[str]:
    """Attribute names of the innermost object({...}) in a variable's type expression."""
    match = re.search(r"object\(\{([^{}]*)\}\)", type_expr)
    assert match, f"no object type in {type_expr!r}"
    return set(re.findall(r"([\w-]+)\s*=", match.group(1)))

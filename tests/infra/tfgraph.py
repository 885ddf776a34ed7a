"""The dependency graph Terraform would build for a root configuration, read from its HCL.

Terraform orders creation by references and depends_on, through module inputs (var), locals and
module outputs; a module call's depends_on makes everything inside the module wait. This module
rebuilds that graph over every resource of a root and its modules, so that tests can ask what a
resource is created after, and what a principal or an enabled API a resource relies on comes
from. It is derived from the HCL alone: nothing here lists relayflow's resources.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from tfconfig import Block, Config, load, strings

# Identity resources: a principal named through one of these exists once it is created. Cloud
# Storage's service agent is made to exist by reading it: the data source calls
# projects.serviceAccount.get, which creates it (https://cloud.google.com/storage/docs/projects#service-agents).
IDENTITY_TYPES = {
    "google_service_account",
    "google_project_service_identity",
    "google_storage_project_service_account",
}

_RESOURCE = re.compile(r"(?<![\w.])(data\.)?(google_\w+|terraform_data)\.(\w+)")
_VAR = re.compile(r"(?<![\w.])var\.(\w+)")
_LOCAL = re.compile(r"(?<![\w.])local\.(\w+)")
_MODULE_OUTPUT = re.compile(r"(?<![\w.])module\.(\w+)\.(\w+)")
_MODULE = re.compile(r"(?<![\w.])module\.(\w+)(?![\w.])")


@dataclass(frozen=True)
class Instance:
    """One module instance: its configuration, where it sits, and the call that made it."""

    config: Config
    path: tuple[str, ...]
    parent: Instance | None = None
    call: Block | None = None

    def prefix(self) -> str:
        return "".join(f"module.{name}." for name in self.path)

    def address(self, block: Block) -> str:
        kind = "data." if block.kind == "data" else ""
        return f"{self.prefix()}{kind}{block.type}.{block.name}"


@dataclass(frozen=True)
class Node:
    """A resource or data block of one module instance."""

    address: str
    block: Block
    instance: Instance

    @property
    def type(self) -> str:
        return self.block.type


@dataclass(frozen=True)
class Source:
    """Where a value comes from: a resource, an input of the root, or literal text."""

    kind: str  # "resource", "input" or "literal"
    value: str


@dataclass
class Graph:
    """Resources of a root configuration and what each is created after."""

    root: Path
    nodes: dict[str, Node] = field(default_factory=dict)
    instances: list[Instance] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._add(Instance(load(self.root.resolve()), ()))

    def _add(self, instance: Instance) -> None:
        self.instances.append(instance)
        for block in instance.config.resources + instance.config.data:
            node = Node(instance.address(block), block, instance)
            self.nodes[node.address] = node
        for name, call in instance.config.modules.items():
            child = load((instance.config.path / call.body["source"]).resolve())
            self._add(Instance(child, (*instance.path, name), instance, call))

    # --- References -------------------------------------------------------------------------

    def _child(self, instance: Instance, name: str) -> Instance:
        return next(i for i in self.instances if i.parent is instance and i.path[-1] == name)

    def resources_in(self, instance: Instance) -> set[str]:
        """Every resource of a module instance and of the modules it calls."""
        found = {n.address for n in self.nodes.values() if n.instance is instance}
        for child in (i for i in self.instances if i.parent is instance):
            found |= self.resources_in(child)
        return found

    def refs(self, value: Any, instance: Instance, seen: frozenset[str] = frozenset()) -> set[str]:
        """Resources an expression (or any parsed HCL value) refers to, through var, local and
        module outputs; ``module.X`` alone (as in depends_on) means all of module X."""
        found: set[str] = set()
        for text in strings(value):
            found |= self._refs_in_text(text, instance, seen)
        return found

    def _refs_in_text(self, text: str, instance: Instance, seen: frozenset[str]) -> set[str]:
        found: set[str] = set()
        for data, type_, name in _RESOURCE.findall(text):
            address = f"{instance.prefix()}{data}{type_}.{name}"
            if address in self.nodes:
                found.add(address)
        for name in _LOCAL.findall(text):
            key = f"{instance.prefix()}local.{name}"
            if key not in seen and name in instance.config.locals:
                found |= self.refs(instance.config.locals[name], instance, seen | {key})
        for name in _VAR.findall(text):
            key = f"{instance.prefix()}var.{name}"
            if key not in seen and instance.call is not None and name in instance.call.body:
                assert instance.parent is not None
                found |= self.refs(instance.call.body[name], instance.parent, seen | {key})
        for name, output in _MODULE_OUTPUT.findall(text):
            child = self._child(instance, name)
            key = f"{child.prefix()}output.{output}"
            if key not in seen and output in child.config.outputs:
                found |= self.refs(child.config.outputs[output].body["value"], child, seen | {key})
        for name in _MODULE.findall(text):
            found |= self.resources_in(self._child(instance, name))
        return found

    # --- Dependencies -------------------------------------------------------------------------

    @cached_property
    def direct(self) -> dict[str, set[str]]:
        """What each resource waits for directly: its references and depends_on, and the
        depends_on of every module call it sits in."""
        edges: dict[str, set[str]] = {}
        for address, node in self.nodes.items():
            waits = self.refs(node.block.body, node.instance)
            instance = node.instance
            while instance.call is not None:
                assert instance.parent is not None
                waits |= self.refs(instance.call.body.get("depends_on", []), instance.parent)
                instance = instance.parent
            edges[address] = waits
        return edges

    def after(self, address: str) -> set[str]:
        """Everything ``address`` is created after (the transitive closure)."""
        done: set[str] = set()
        todo = list(self.direct[address])
        while todo:
            current = todo.pop()
            if current not in done:
                done.add(current)
                todo.extend(self.direct[current])
        return done

    # --- Where a value comes from ---------------------------------------------------------------

    def sources(
        self, value: Any, instance: Instance, seen: frozenset[str] = frozenset()
    ) -> set[Source]:
        """The resources, root inputs and literal text a value is made of (each.value follows the
        enclosing for_each through the caller)."""
        found: set[Source] = set()
        for text in strings(value):
            found |= self._sources_in_text(text, instance, seen)
        return found

    def _sources_in_text(self, text: str, instance: Instance, seen: frozenset[str]) -> set[Source]:
        found = {Source("literal", part) for part in _literal_parts(text)}
        for data, type_, name in _RESOURCE.findall(text):
            found.add(Source("resource", f"{instance.prefix()}{data}{type_}.{name}"))
        for name in _LOCAL.findall(text):
            key = f"{instance.prefix()}local.{name}"
            if key not in seen and name in instance.config.locals:
                found |= self.sources(instance.config.locals[name], instance, seen | {key})
        for name in _VAR.findall(text):
            key = f"{instance.prefix()}var.{name}"
            if key in seen:
                continue
            if instance.call is None:
                found.add(Source("input", name))
            elif name in instance.call.body:
                assert instance.parent is not None
                found |= self.sources(instance.call.body[name], instance.parent, seen | {key})
            else:
                default = instance.config.variables[name].body.get("default")
                found |= self.sources(default, instance, seen | {key})
        for name, output in _MODULE_OUTPUT.findall(text):
            child = self._child(instance, name)
            key = f"{child.prefix()}output.{output}"
            if key not in seen and output in child.config.outputs:
                body = child.config.outputs[output].body["value"]
                found |= self.sources(body, child, seen | {key})
        return found

    def member_sources(self, node: Node, attribute: str = "member") -> set[Source]:
        """Sources of a principal attribute; ``each.value`` stands for the block's for_each."""
        expression = str(node.block.body[attribute])
        found = self.sources(expression.replace("each.value", ""), node.instance)
        if "each." in expression:
            found |= self.sources(node.block.body.get("for_each", ""), node.instance)
        return found

    def nodes_of(self, *types: str) -> Iterator[Node]:
        return (n for n in self.nodes.values() if n.type in types and n.block.kind == "resource")


def _literal_parts(text: str) -> list[str]:
    """Literal text of an expression: the string itself, or the quoted parts and the template
    text around interpolations."""
    if "${" not in text:
        return [text]
    outside = re.sub(r"\$\{[^{}]*\}", " ", text)
    quoted = re.findall(r'"([^"$]*)"', text)
    return [p for p in [outside, *quoted] if p.strip()]

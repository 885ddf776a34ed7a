"""The deployment as the Terraform (infra/terraform, read with python-hcl2) and topology.json
configure it: Firestore's index exemptions and composite indexes, Cloud Run's sizes.

Terraform itself is not run: the module's HCL is read and the few expressions relayflow's
configuration uses are resolved here — ``local.topology.*`` (topology.json), ``local.NAME``,
``var.NAME`` and ``var.NAME["KEY"]`` (the environment's value if it passes one, else the
variable's default). Anything else is an error that names the expression, so a configuration
the model cannot read is never read wrong. python-hcl2 is a development dependency: only the
bench and the tests import this module.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import hcl2
from hcl2 import SerializationOptions

from relayflow.capacity.deployment import (
    CompositeIndex,
    Deployment,
    Indexes,
    QueueKind,
    Service,
    topology_parts,
)
from relayflow.core.breaker_state import MAX_FLUSH_S, SETTLED_WRITES_PER_S
from relayflow.core.breakers import Breakers
from relayflow.settings import Settings

_OPTIONS = SerializationOptions(with_comments=False, strip_string_quotes=True)
_META = "__is_block__"
_EXPRESSION = re.compile(r"^\$\{(.*)\}$", re.DOTALL)
_VAR = re.compile(r'^var\.([A-Za-z_][\w-]*)(?:\["([^"]+)"\])?$')
_LOCAL = re.compile(r"^local\.([A-Za-z_][\w-]*)((?:\.[A-Za-z_][\w-]*)*)$")
# The services whose sizes the model reads, by their Terraform module's `name`.
SERVICES = ("start-flow", "worker", "poller", "api")


class Unresolvable(ValueError):
    """Raised when the HCL holds an expression the model cannot evaluate."""


@dataclass
class Directory:
    """The blocks of one directory of .tf files that the model reads."""

    locals: dict[str, Any] = field(default_factory=dict)
    modules: dict[str, dict[str, Any]] = field(default_factory=dict)
    variables: dict[str, dict[str, Any]] = field(default_factory=dict)


def load(path: Path) -> Directory:
    """Parse every .tf file of ``path``."""
    found = Directory()
    files = sorted(path.glob("*.tf"))
    if not files:
        raise FileNotFoundError(f"no .tf files in {path}")
    for tf in files:
        with tf.open(encoding="utf-8") as handle:
            doc = hcl2.load(handle, serialization_options=_OPTIONS)
        for block in doc.get("locals", []):
            found.locals.update((k, v) for k, v in block.items() if k != _META)
        for kind, target in (("module", found.modules), ("variable", found.variables)):
            for entry in doc.get(kind, []):
                target.update((k, v) for k, v in entry.items() if k != _META)
    return found


@dataclass
class Scope:
    """Where expressions are evaluated: a module's locals and variables, the topology, and
    the values its caller (an environment) passes."""

    directory: Directory
    topology: Mapping[str, Any]
    caller: Mapping[str, Any] = field(default_factory=dict)
    caller_scope: Scope | None = None

    def resolve(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {self.resolve(k): self.resolve(v) for k, v in value.items() if k != _META}
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if not isinstance(value, str):
            return value
        match = _EXPRESSION.match(value)
        if match is None:
            if "${" in value:
                raise Unresolvable(f"cannot evaluate {value!r}")
            return value
        return self._expression(match.group(1).strip())

    def _expression(self, expr: str) -> Any:
        while expr.startswith("(") and expr.endswith(")"):
            expr = expr[1:-1].strip()
        if (var := _VAR.match(expr)) is not None:
            value = self._variable(var.group(1))
            return value if var.group(2) is None else _key(value, var.group(2), expr)
        if (local := _LOCAL.match(expr)) is not None:
            name, rest = local.group(1), local.group(2)
            if name == "topology":
                return _walk(self.topology, rest, expr)
            if name not in self.directory.locals:
                raise Unresolvable(f"no local {name!r} ({expr})")
            return _walk(self.resolve(self.directory.locals[name]), rest, expr)
        raise Unresolvable(f"cannot evaluate {expr!r}")

    def _variable(self, name: str) -> Any:
        if name in self.caller and self.caller_scope is not None:
            return self.caller_scope.resolve(self.caller[name])
        declared = self.directory.variables.get(name)
        if declared is None or "default" not in declared:
            raise Unresolvable(f"variable {name!r} has no value here")
        return self.resolve(declared["default"])


def _key(value: Any, key: str, expr: str) -> Any:
    if not isinstance(value, Mapping) or key not in value:
        raise Unresolvable(f"{expr}: no key {key!r}")
    return value[key]


def _walk(value: Any, dotted: str, expr: str) -> Any:
    for part in (p for p in dotted.split(".") if p):
        value = _key(value, part, expr)
    return value


def _module_by_source(directory: Directory, tail: str) -> dict[str, dict[str, Any]]:
    return {
        name: body
        for name, body in directory.modules.items()
        if str(body.get("source", "")).rstrip("/").endswith(tail)
    }


def read_indexes(scope: Scope, firestore_module: Directory) -> Indexes:
    """The exemptions (``unindexed_fields``, any other map of field lists named for an
    exemption, and the TTL field of ``ttl_collections``) and the composite indexes the
    relayflow module gives its Firestore module."""
    modules = _module_by_source(scope.directory, "/firestore")
    if len(modules) != 1:
        raise Unresolvable(f"expected one Firestore module, found {sorted(modules)}")
    (body,) = modules.values()
    exempt: dict[str, set[str]] = {}
    for arg, value in body.items():
        if "unindexed" in arg or "exempt" in arg:
            for collection, fields in dict(scope.resolve(value)).items():
                exempt.setdefault(str(collection), set()).update(str(f) for f in fields)
    ttl_field = body.get(
        "ttl_field", firestore_module.variables.get("ttl_field", {}).get("default")
    )
    if ttl_field is not None:
        for collection in scope.resolve(body.get("ttl_collections", [])):
            exempt.setdefault(str(collection), set()).add(str(scope.resolve(ttl_field)))
    composites = tuple(
        CompositeIndex(
            name=str(name),
            collection=str(spec["collection"]),
            fields=tuple(str(f["field_path"]) for f in spec["fields"]),
        )
        for name, spec in dict(scope.resolve(body.get("composite_indexes", {}))).items()
    )
    return Indexes({c: frozenset(f) for c, f in exempt.items()}, composites)


def read_services(scope: Scope, service_module: Directory) -> tuple[Service, ...]:
    """Each Cloud Run service's max instances, vCPUs and concurrency."""
    defaults = {k: v.get("default") for k, v in service_module.variables.items()}
    services = []
    for body in _module_by_source(scope.directory, "/service").values():
        name = str(scope.resolve(body.get("name", "")))
        if name not in SERVICES:
            continue

        def value(arg: str, body: dict[str, Any] = body) -> Any:
            return scope.resolve(body[arg]) if arg in body else defaults.get(arg)

        services.append(
            Service(
                name=name,
                max_instances=int(value("max_instances")),
                cpu=float(value("cpu")),
                concurrency=int(value("max_concurrency")),
            )
        )
    return tuple(sorted(services, key=lambda s: SERVICES.index(s.name)))


def queue_shards(scope: Scope) -> int | None:
    """The environment's ``queue_shards`` (the module's ``coalesce(var.queue_shards, <the
    topology's>)``): None when the environment leaves it to the topology."""
    if "queue_shards" not in scope.caller and "default" not in scope.directory.variables.get(
        "queue_shards", {}
    ):
        return None
    value = scope.resolve("${var.queue_shards}")
    return None if value is None else int(value)


def with_queue_shards(queues: tuple[QueueKind, ...], shards: int | None) -> tuple[QueueKind, ...]:
    """Every kind with the environment's shard count (one count for all kinds), if it sets one."""
    if shards is None:
        return queues
    return tuple(replace(q, shards=shards) for q in queues)


def breaker_shards(scope: Scope) -> int:
    """``RELAYFLOW_BREAKER_SHARDS`` if the module's environment for every component sets it,
    else relayflow's default (relayflow.settings)."""
    env = scope.directory.locals.get("common_env", {})
    value = env.get("RELAYFLOW_BREAKER_SHARDS") if isinstance(env, dict) else None
    if value is None:
        return int(Settings.model_fields["breaker_shards"].default)
    return int(scope.resolve(value))


# How often an instance adds its call counts to its breaker window at the least and at the
# most, and what one window document takes once its writers paced their flushes (the engine's
# own figures: relayflow.core.breakers, relayflow.core.breaker_state).
BREAKER_FLUSH_S = float(inspect.signature(Breakers).parameters["flush_s"].default)
BREAKER_MAX_FLUSH_S = MAX_FLUSH_S
BREAKER_WRITES_PER_S = SETTLED_WRITES_PER_S


def read_deployment(repo: Path, env: str = "prod") -> Deployment:
    """The deployment of environment ``env`` (infra/terraform/envs/ENV) of the repo at ``repo``."""
    topology = json.loads((repo / "relayflow" / "topology.json").read_text(encoding="utf-8"))
    terraform = repo / "infra" / "terraform"
    env_dir = load(terraform / "envs" / env)
    env_scope = Scope(env_dir, topology)
    relayflow = _module_by_source(env_dir, "/relayflow")
    caller = next(iter(relayflow.values()), {})
    scope = Scope(load(terraform / "modules" / "relayflow"), topology, caller, env_scope)
    queues, collections, shards = topology_parts(topology)
    return Deployment(
        indexes=read_indexes(scope, load(terraform / "modules" / "firestore")),
        queues=with_queue_shards(queues, queue_shards(scope)),
        collections=collections,
        firestore_shards=shards,
        services=read_services(scope, load(terraform / "modules" / "service")),
        breaker_shards=breaker_shards(scope),
        breaker_flush_s=BREAKER_FLUSH_S,
        breaker_writes_per_s=BREAKER_WRITES_PER_S,
        breaker_max_flush_s=BREAKER_MAX_FLUSH_S,
    )

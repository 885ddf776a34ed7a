"""The google and google-beta provider schemas for the types infra/terraform uses, without them.

The providers cannot be downloaded here, so ``terraform validate`` cannot run. The npm packages
``@cdktf/provider-google`` and ``@cdktf/provider-google-beta`` (16.12.1 = provider 6.50.0) carry
each provider's full schema in their ``.jsii`` files: every resource's arguments with their
types, the values an enumerated argument allows (from the provider's own "Possible values"
docs), nested blocks and whether one may appear more than once, and the attributes a reference
may read. This module extracts the part infra/terraform uses into
``data/google-provider-schema.json`` (committed, so the tests need no npm), and checks a
configuration against it.

Refresh after adding a resource type (needs npm once, then works offline)::

    npm ci --prefix tests/infra/provider-schema
    .venv/bin/python tests/infra/provider_schema.py
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SCHEMA_FILE = HERE / "data" / "google-provider-schema.json"
NODE_MODULES = HERE / "provider-schema" / "node_modules" / "@cdktf"
ASSEMBLIES = {
    "google": ("@cdktf/provider-google", NODE_MODULES / "provider-google" / ".jsii"),
    "google-beta": ("@cdktf/provider-google-beta", NODE_MODULES / "provider-google-beta" / ".jsii"),
}
JSII_FILE = ASSEMBLIES["google"][1]
_DOCS_LINK = re.compile(r"/docs/(resources|data-sources)/(\w+)[ }#]")
_ANCHOR = re.compile(r"#(\w+) ")
_POSSIBLE = re.compile(r"Possible values: (\[[^\]]*\])")

Schema = dict[str, Any]
# A Terraform type as the checker sees it: "string", "number", "bool", "any", or
# ["map" | "list", element type].
TfType = str | list[Any]

# Terraform's built-in provider: not in any npm package, and tiny.
BUILTIN: Schema = {
    "resource": {
        "terraform_data": {
            "attributes": {
                "input": {"required": False, "type": "any"},
                "triggers_replace": {"required": False, "type": "any"},
            },
            "blocks": {},
            "readable": ["id", "input", "output", "triggers_replace"],
        }
    },
    "data": {},
}


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _terraform_name(prop: dict[str, Any]) -> str:
    anchor = _ANCHOR.search(prop.get("docs", {}).get("remarks", ""))
    return anchor.group(1) if anchor else snake(prop["name"])


def _struct_fqn(type_ref: dict[str, Any], types: dict[str, Any], assembly: str) -> str | None:
    """The provider struct a property holds (directly, in a list, or in a union), if any."""
    if "fqn" in type_ref:
        fqn = type_ref["fqn"]
        found = types.get(fqn, {})
        return fqn if fqn.startswith(assembly) and found.get("datatype") else None
    if "collection" in type_ref:
        return _struct_fqn(type_ref["collection"]["elementtype"], types, assembly)
    for member in type_ref.get("union", {}).get("types", []):
        fqn = _struct_fqn(member, types, assembly)
        if fqn:
            return fqn
    return None


def _value_type(type_ref: dict[str, Any]) -> TfType:
    """The Terraform type of a jsii property that is not a block."""
    if "primitive" in type_ref:
        primitive = type_ref["primitive"]
        return {"boolean": "bool", "string": "string", "number": "number"}.get(primitive, "any")
    if "collection" in type_ref:
        collection = type_ref["collection"]
        kind = "map" if collection["kind"] == "map" else "list"
        return [kind, _value_type(collection["elementtype"])]
    members = [t for t in type_ref.get("union", {}).get("types", []) if "fqn" not in t]
    return _value_type(members[0]) if len(members) == 1 else "any"


def _allowed(prop: dict[str, Any]) -> list[str] | None:
    docs = prop.get("docs", {})
    match = _POSSIBLE.search(docs.get("summary", "") + " " + docs.get("remarks", ""))
    return json.loads(match.group(1)) if match else None


def _block(fqn: str, types: dict[str, Any], assembly: str) -> Schema:
    """Arguments (name -> required, type, allowed values) and nested blocks of a jsii struct."""
    attributes: dict[str, Any] = {}
    nested: dict[str, Schema] = {}
    for prop in types[fqn].get("properties", []):
        name = _terraform_name(prop)
        required = not prop.get("optional", False)
        struct = _struct_fqn(prop["type"], types, assembly)
        if struct:
            # A block the provider allows once is typed as the struct itself, not a list of it.
            max_one = "fqn" in prop["type"]
            nested[name] = {**_block(struct, types, assembly), "required": required}
            nested[name]["max_one"] = max_one
        else:
            entry: dict[str, Any] = {"required": required, "type": _value_type(prop["type"])}
            allowed = _allowed(prop)
            if allowed:
                entry["allowed"] = allowed
            attributes[name] = entry
    return {"attributes": attributes, "blocks": nested}


def _readable(cls: dict[str, Any]) -> list[str]:
    """Attributes a reference may read (arguments and computed ones)."""
    names = {
        snake(p["name"])
        for p in cls.get("properties", [])
        if not p.get("static") and not p["name"].endswith("Input")
    }
    return sorted(names)


def _classes(types: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(kind, terraform type, class) of each resource and data source class."""
    for cls in types.values():
        if cls.get("kind") != "class" or not cls.get("initializer"):
            continue
        link = _DOCS_LINK.search(cls.get("docs", {}).get("summary", "") + " ")
        if link:
            kind = "resource" if link.group(1) == "resources" else "data"
            # Most docs pages drop the provider prefix (pubsub_topic); a few keep it.
            yield kind, "google_" + link.group(2).removeprefix("google_"), cls


def extract(jsii: dict[str, Any], wanted: set[tuple[str, str]], assembly: str) -> Schema:
    """The schema of each (kind, type) in ``wanted``, e.g. ("resource", "google_pubsub_topic")."""
    types = jsii["types"]
    out: Schema = {"provider_version": _provider_version(types), "resource": {}, "data": {}}
    for kind, type_, cls in _classes(types):
        if (kind, type_) in wanted:
            params = cls["initializer"]["parameters"]
            config = next(p["type"]["fqn"] for p in params if p["name"] == "config")
            entry = _block(config, types, assembly)
            entry["readable"] = _readable(cls)
            out[kind][type_] = entry
    return out


def _provider_version(types: dict[str, Any]) -> str:
    for cls in types.values():
        summary = cls.get("docs", {}).get("summary", "")
        match = re.search(r"hashicorp/google(?:-beta)?/([\d.]+)/docs", summary)
        if match:
            return match.group(1)
    raise ValueError("no provider version in the jsii docs")


def provider_of(block_body: dict[str, Any], type_: str) -> str:
    """Which provider serves a resource or data block: its provider meta-argument, or its type."""
    if type_ == "terraform_data":
        return "terraform"
    chosen = str(block_body.get("provider", "google")).strip("${}")
    return chosen.split(".")[0]


def used_types() -> set[tuple[str, str, str]]:
    """(provider, kind, type) of every resource and data block in infra/terraform."""
    from tfconfig import all_dirs, load

    configs = [load(path) for path in all_dirs()]
    return {
        (provider_of(block.body, block.type), block.kind, block.type)
        for c in configs
        for block in c.resources + c.data
    }


def load_schema() -> Schema:
    """The committed schemas by provider, with Terraform's built-in one added."""
    schema: Schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    schema["terraform"] = BUILTIN
    return schema


def entry_for(schema: Schema, provider: str, kind: str, type_: str) -> Schema | None:
    found: Schema | None = schema.get(provider, {}).get(kind, {}).get(type_)
    return found


# --- Checking a configuration ---------------------------------------------------------------

# Meta-arguments and meta-blocks Terraform itself handles on any resource or data block.
META = {"count", "for_each", "depends_on", "provider", "lifecycle", "provisioner", "__is_block__"}


def _is_block_list(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(v, dict) and v.get("__is_block__") for v in value
    )


class Scope:
    """What an expression may refer to in one configuration: variable types and validations."""

    def __init__(
        self,
        variables: dict[str, dict[str, Any]] | None = None,
        local_values: dict[str, Any] | None = None,
    ) -> None:
        self.variables = variables or {}
        self.locals = local_values or {}

    def variable_type(self, name: str) -> str | None:
        body = self.variables.get(name)
        return _strip(str(body["type"])) if body and "type" in body else None

    def variable_choices(self, name: str) -> list[str] | None:
        """The values a variable's validation admits, if it is a contains([...], var.x) check."""
        for validation in (self.variables.get(name) or {}).get("validation", []):
            match = re.search(
                rf"contains\(\[([^\]]*)\],\s*var\.{re.escape(name)}\)", validation["condition"]
            )
            if match:
                return re.findall(r'"([^"]*)"', match.group(1))
        return None


def _strip(expr: str) -> str:
    return expr[2:-1] if expr.startswith("${") and expr.endswith("}") else expr


def check_body(
    body: dict[str, Any], schema: Schema, where: str, scope: Scope | None = None
) -> list[str]:
    """Problems of one block body: unknown or misused names, missing ones, values of the wrong
    type or outside the allowed ones, and blocks repeated that the provider allows once."""
    scope = scope or Scope()
    problems: list[str] = []
    present = set(body)
    for dynamic in body.get("dynamic", []):
        for label, spec in dynamic.items():
            if label == "__is_block__":
                continue
            present.add(label)
            problems += _check_dynamic(label, spec, schema, f"{where}.dynamic.{label}", scope)
    for key, value in body.items():
        if key in META or key == "dynamic":
            continue
        problems += _check_key(key, value, schema, where, scope)
    missing = [
        a for a, spec in schema["attributes"].items() if spec["required"] and a not in present
    ]
    missing += [b for b, s in schema["blocks"].items() if s.get("required") and b not in present]
    problems += [f"{where}: missing required {name}" for name in missing]
    return problems


def _check_dynamic(
    label: str, spec: dict[str, Any], schema: Schema, where: str, scope: Scope
) -> list[str]:
    if label not in schema["blocks"]:
        return [f"{where}: no such block"]
    problems = _check_nested(label, spec["content"], schema, where, scope)
    if schema["blocks"][label].get("max_one") and "?" not in str(spec.get("for_each", "")):
        problems.append(f"{where}: allowed once, but for_each is not a zero-or-one conditional")
    return problems


def _check_key(key: str, value: Any, schema: Schema, where: str, scope: Scope) -> list[str]:
    if key in schema["blocks"]:
        if not _is_block_list(value):
            return [f"{where}.{key}: is a block, written as an argument"]
        problems = _check_nested(key, value, schema, f"{where}.{key}", scope)
        if schema["blocks"][key].get("max_one") and len(value) > 1:
            problems.append(f"{where}.{key}: allowed once, written {len(value)} times")
        return problems
    if key in schema["attributes"]:
        if _is_block_list(value):
            return [f"{where}.{key}: is an argument, written as a block"]
        return check_value(value, schema["attributes"][key], f"{where}.{key}", scope)
    return [f"{where}.{key}: no such argument or block"]


def _check_nested(
    key: str, bodies: list[dict[str, Any]], schema: Schema, where: str, scope: Scope
) -> list[str]:
    if key not in schema["blocks"]:
        return [f"{where}: no such block"]
    return [p for body in bodies for p in check_body(body, schema["blocks"][key], where, scope)]


# --- Value types and allowed values -----------------------------------------------------------

_COLLECTION_FUNCTIONS = {
    "concat": "list", "tolist": "list", "toset": "list", "values": "list", "keys": "list",
    "flatten": "list", "distinct": "list", "compact": "list", "sort": "list",
    "merge": "map", "tomap": "map", "zipmap": "map",
}  # fmt: skip
_STRING_FUNCTIONS = {
    "format", "join", "jsonencode", "templatefile", "tostring", "lower", "upper", "replace",
    "trimspace", "substr", "base64encode", "file", "yamlencode", "sha256", "basename",
}  # fmt: skip


def infer(value: Any, scope: Scope) -> tuple[str, list[str] | None]:
    """(kind, possible string values) of a value: kind is string, number, bool, list, map, null
    or unknown. Possible values are known for literals, conditionals of literals and variables
    whose validation lists them."""
    if value is None:
        return "null", None
    if isinstance(value, bool):
        return "bool", None
    if isinstance(value, int | float):
        return "number", None
    if isinstance(value, list):
        return "list", None
    if isinstance(value, dict):
        return "map", None
    text = str(value)
    if "${" not in text:
        return "string", [text]
    if not (text.startswith("${") and text.endswith("}")) or text.count("${") > 1:
        return "string", None  # a template: always a string
    return _infer_expression(_strip(text), scope)


def _infer_expression(expr: str, scope: Scope) -> tuple[str, list[str] | None]:
    variable = re.fullmatch(r"var\.(\w+)", expr)
    if variable:
        return _kind_of_type(scope.variable_type(variable.group(1))), scope.variable_choices(
            variable.group(1)
        )
    conditional = re.fullmatch(r'[^?"]+\?\s*"([^"]*)"\s*:\s*"([^"]*)"', expr)
    if conditional:
        return "string", [conditional.group(1), conditional.group(2)]
    call = re.match(r"(\w+)\(", expr)
    if call and expr.endswith(")"):
        name = call.group(1)
        if name in _STRING_FUNCTIONS:
            return "string", None
        if name in _COLLECTION_FUNCTIONS:
            return _COLLECTION_FUNCTIONS[name], None
    if re.fullmatch(r"\[.*\]", expr, re.S) and " for " not in expr[:6]:
        return "list", None
    return "unknown", None


def _kind_of_type(type_expr: str | None) -> str:
    if not type_expr:
        return "unknown"
    head = type_expr.split("(")[0].strip()
    return {
        "string": "string", "number": "number", "bool": "bool", "list": "list", "set": "list",
        "tuple": "list", "map": "map", "object": "map",
    }.get(head, "unknown")  # fmt: skip


# Which inferred kinds can never convert to which Terraform types (Terraform converts strings
# to numbers and bools when their text allows, and numbers and bools to strings).
_NEVER = {
    "string": {"list", "map"},
    "number": {"bool", "list", "map"},
    "bool": {"number", "list", "map"},
    "list": {"string", "number", "bool", "map"},
    "map": {"string", "number", "bool", "list"},
}


def check_value(value: Any, spec: dict[str, Any], where: str, scope: Scope) -> list[str]:
    """Problems of one argument's value against its type and allowed values."""
    expected = spec["type"]
    kind, choices = infer(value, scope)
    head = expected if isinstance(expected, str) else expected[0]
    if head != "any" and kind in _NEVER and head in _NEVER[kind]:
        return [f"{where}: a {kind} where the provider expects {_show(expected)}"]
    problems = _check_literal_text(value, head, where)
    problems += _check_elements(value, expected, where, scope)
    allowed = spec.get("allowed")
    if allowed and choices is not None:
        problems += [f"{where}: {c!r} is not one of {allowed}" for c in choices if c not in allowed]
    return problems


def _check_literal_text(value: Any, head: str, where: str) -> list[str]:
    if not isinstance(value, str) or "${" in value:
        return []
    if head == "number" and not re.fullmatch(r"-?\d+(\.\d+)?", value):
        return [f"{where}: {value!r} is not a number"]
    if head == "bool" and value not in ("true", "false"):
        return [f"{where}: {value!r} is not a bool"]
    return []


def _check_elements(value: Any, expected: TfType, where: str, scope: Scope) -> list[str]:
    if isinstance(expected, str):
        return []
    element = {"type": expected[1]}
    if isinstance(value, list):
        items = list(enumerate(value))
    elif isinstance(value, dict):
        items = [(k, v) for k, v in value.items() if k != "__is_block__"]
    else:
        return []
    return [p for key, item in items for p in check_value(item, element, f"{where}[{key}]", scope)]


def _show(type_: TfType) -> str:
    return type_ if isinstance(type_, str) else f"{type_[0]}({_show(type_[1])})"


# --- References ---------------------------------------------------------------------------------

_REFERENCE = re.compile(
    r"(?<![\w.])(data\.)?(google_\w+|terraform_data)\.(\w+)(?:\[[^\]]*\])?(?:\.(\w+))?"
)


def check_references(
    expression: str, schema: Schema, declared: set[str] | None = None
) -> list[str]:
    """Resource and data references that name no declared block, or an attribute its type lacks.

    ``declared`` holds the addresses declared in the same configuration ("google_x.name",
    "data.google_x.name"); None skips that half of the check.
    """
    problems = []
    for data, type_, name, attribute in _REFERENCE.findall(expression):
        address = f"{data}{type_}.{name}"
        if declared is not None and address not in declared:
            problems.append(f"{address}: not declared in this configuration")
            continue
        entry = _any_provider_entry(schema, "data" if data else "resource", type_)
        if entry is None:
            problems.append(f"{data}{type_}: unknown type")
        elif attribute and attribute not in entry["readable"]:
            problems.append(f"{address}.{attribute}: no such attribute")
    return problems


def _any_provider_entry(schema: Schema, kind: str, type_: str) -> Schema | None:
    for provider in ("google", "google-beta", "terraform"):
        found = entry_for(schema, provider, kind, type_)
        if found:
            return found
    return None


def main() -> int:
    wanted = used_types()
    schema: Schema = {}
    for provider, (assembly, jsii_file) in ASSEMBLIES.items():
        jsii = json.loads(jsii_file.read_text(encoding="utf-8"))
        types = {(k, t) for p, k, t in wanted if p == provider}
        schema[provider] = extract(jsii, types, assembly)
        print(f"{provider} {schema[provider]['provider_version']}: {len(types)} types")
    SCHEMA_FILE.parent.mkdir(exist_ok=True)
    SCHEMA_FILE.write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {SCHEMA_FILE}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    sys.exit(main())

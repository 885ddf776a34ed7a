"""The google provider's schema for the resource types infra/terraform uses, without the provider.

The provider cannot be downloaded here, so ``terraform validate`` cannot run. The npm package
``@cdktf/provider-google`` (16.12.1 = google provider 6.50.0) carries the provider's full schema
in its ``.jsii`` file: every resource's arguments, nested blocks and readable attributes. This
module extracts the part infra/terraform uses into ``data/google-provider-schema.json``
(committed, so the tests need no npm), and checks a configuration against it.

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
JSII_FILE = HERE / "provider-schema" / "node_modules" / "@cdktf" / "provider-google" / ".jsii"
ASSEMBLY = "@cdktf/provider-google"
_DOCS_LINK = re.compile(r"/docs/(resources|data-sources)/(\w+)[ }#]")
_ANCHOR = re.compile(r"#(\w+) ")

Schema = dict[str, Any]


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _terraform_name(prop: dict[str, Any]) -> str:
    anchor = _ANCHOR.search(prop.get("docs", {}).get("remarks", ""))
    return anchor.group(1) if anchor else snake(prop["name"])


def _struct_fqn(type_ref: dict[str, Any], types: dict[str, Any]) -> str | None:
    """The provider struct a property holds (directly, in a list, or in a union), if any."""
    if "fqn" in type_ref:
        fqn = type_ref["fqn"]
        found = types.get(fqn, {})
        return fqn if fqn.startswith(ASSEMBLY) and found.get("datatype") else None
    if "collection" in type_ref:
        return _struct_fqn(type_ref["collection"]["elementtype"], types)
    for member in type_ref.get("union", {}).get("types", []):
        fqn = _struct_fqn(member, types)
        if fqn:
            return fqn
    return None


def _block(fqn: str, types: dict[str, Any]) -> Schema:
    """Arguments (name -> required) and nested blocks of a jsii struct."""
    attributes: dict[str, bool] = {}
    nested: dict[str, Schema] = {}
    for prop in types[fqn].get("properties", []):
        name = _terraform_name(prop)
        required = not prop.get("optional", False)
        struct = _struct_fqn(prop["type"], types)
        if struct:
            nested[name] = {**_block(struct, types), "required": required}
        else:
            attributes[name] = required
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
            yield kind, f"google_{link.group(2)}", cls


def extract(jsii: dict[str, Any], wanted: set[tuple[str, str]]) -> Schema:
    """The schema of each (kind, type) in ``wanted``, e.g. ("resource", "google_pubsub_topic")."""
    types = jsii["types"]
    out: Schema = {"provider_version": _provider_version(types), "resource": {}, "data": {}}
    for kind, type_, cls in _classes(types):
        if (kind, type_) in wanted:
            params = cls["initializer"]["parameters"]
            config = next(p["type"]["fqn"] for p in params if p["name"] == "config")
            entry = _block(config, types)
            entry["readable"] = _readable(cls)
            out[kind][type_] = entry
    return out


def _provider_version(types: dict[str, Any]) -> str:
    for cls in types.values():
        match = re.search(r"hashicorp/google/([\d.]+)/docs", cls.get("docs", {}).get("summary", ""))
        if match:
            return match.group(1)
    raise ValueError("no provider version in the jsii docs")


def used_types() -> set[tuple[str, str]]:
    """(kind, type) of every resource and data block in infra/terraform."""
    from tfconfig import all_dirs, load

    configs = [load(path) for path in all_dirs()]
    return {(block.kind, block.type) for c in configs for block in c.resources + c.data}


# --- Checking a configuration ---------------------------------------------------------------

# Meta-arguments and meta-blocks Terraform itself handles on any resource or data block.
META = {"count", "for_each", "depends_on", "provider", "lifecycle", "__is_block__"}


def _is_block_list(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(v, dict) and v.get("__is_block__") for v in value
    )


def check_body(body: dict[str, Any], schema: Schema, where: str) -> list[str]:
    """Problems of one block body against its schema: unknown or misused names, missing ones."""
    problems: list[str] = []
    present = set(body)
    for dynamic in body.get("dynamic", []):
        for label, spec in dynamic.items():
            if label == "__is_block__":
                continue
            present.add(label)
            problems += _check_nested(label, spec["content"], schema, f"{where}.dynamic.{label}")
    for key, value in body.items():
        if key in META or key == "dynamic":
            continue
        problems += _check_key(key, value, schema, where)
    missing = [a for a, required in schema["attributes"].items() if required and a not in present]
    missing += [b for b, s in schema["blocks"].items() if s.get("required") and b not in present]
    problems += [f"{where}: missing required {name}" for name in missing]
    return problems


def _check_key(key: str, value: Any, schema: Schema, where: str) -> list[str]:
    if key in schema["blocks"]:
        if not _is_block_list(value):
            return [f"{where}.{key}: is a block, written as an argument"]
        return _check_nested(key, value, schema, f"{where}.{key}")
    if key in schema["attributes"]:
        if _is_block_list(value):
            return [f"{where}.{key}: is an argument, written as a block"]
        return []
    return [f"{where}.{key}: no such argument or block"]


def _check_nested(key: str, bodies: list[dict[str, Any]], schema: Schema, where: str) -> list[str]:
    if key not in schema["blocks"]:
        return [f"{where}: no such block"]
    return [p for body in bodies for p in check_body(body, schema["blocks"][key], where)]


_REFERENCE = re.compile(r"(?<![\w.])(data\.)?(google_\w+)\.(\w+)\.(\w+)")


def check_references(expression: str, schema: Schema) -> list[str]:
    """Attribute reads (google_x.name.attr, data.google_x.name.attr) the type does not have."""
    problems = []
    for data, type_, _name, attribute in _REFERENCE.findall(expression):
        entry = schema["data" if data else "resource"].get(type_)
        if entry is None:
            problems.append(f"{data}{type_}: unknown type")
        elif attribute not in entry["readable"]:
            problems.append(f"{data}{type_}.{_name}.{attribute}: no such attribute")
    return problems


def main() -> int:
    jsii = json.loads(JSII_FILE.read_text(encoding="utf-8"))
    schema = extract(jsii, used_types())
    SCHEMA_FILE.parent.mkdir(exist_ok=True)
    SCHEMA_FILE.write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {SCHEMA_FILE} (google provider {schema['provider_version']})")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    sys.exit(main())

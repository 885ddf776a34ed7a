"""The BigQuery table result events land in, derived from the result event's JSON Schema.

A Pub/Sub BigQuery subscription with ``use_table_schema`` writes each field of a JSON message
into the table's column of the same name, and with ``write_metadata`` the message's
``subscription_name``, ``message_id``, ``publish_time`` and ``attributes`` into columns of those
names (https://cloud.google.com/pubsub/docs/bigquery#properties_subscription). The table's
schema is therefore the event's: one column per property, typed from the JSON Schema, plus the
metadata columns. Terraform reads the committed file (``TABLE_FILE``,
``infra/terraform/modules/analytics``); ``python -m relayflow.schemas --write`` regenerates it
with the JSON Schemas, and a test fails when it differs from what the event's schema yields.

Types: a string is ``STRING`` (``TIMESTAMP`` for ``format: date-time``, ``DATE`` for
``date``), an integer ``INTEGER``, a number ``FLOAT``, a boolean ``BOOLEAN``; an object with
declared properties a ``RECORD`` of its own columns; an object without (free-form data, a
string-to-string map such as labels) or a value of several types ``JSON``, which keeps it
whole and is queried with ``JSON_VALUE``; an array ``REPEATED``. Every column is ``NULLABLE``:
BigQuery may relax a column from ``REQUIRED`` but never tighten one, and a field may become
optional in a later event. Names are BigQuery's canonical ones (``INTEGER``, not ``INT64``), as
the API returns them, so Terraform sees no difference between the file and the table.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# The source tree's copy, beside the Terraform that reads it: absent from an installed wheel.
TABLE_FILE = (
    Path(__file__).resolve().parents[2]
    / "infra"
    / "terraform"
    / "modules"
    / "analytics"
    / "result-events.table.json"
)
# BigQuery keeps at most 1,024 characters of a column's description.
MAX_DESCRIPTION = 1024
Column = dict[str, Any]

# What ``write_metadata`` adds to every row. ``publish_time`` is the partitioning column:
# when the result event was published, so a day's partition holds that day's endings.
METADATA: tuple[Column, ...] = (
    {
        "name": "subscription_name",
        "type": "STRING",
        "mode": "NULLABLE",
        "description": "The BigQuery subscription that wrote the row (Pub/Sub metadata).",
    },
    {
        "name": "message_id",
        "type": "STRING",
        "mode": "NULLABLE",
        "description": "The Pub/Sub message id; a redelivered event repeats it.",
    },
    {
        "name": "publish_time",
        "type": "TIMESTAMP",
        "mode": "NULLABLE",
        "description": "When the event was published; the table is partitioned by its day.",
    },
    {
        "name": "attributes",
        "type": "JSON",
        "mode": "NULLABLE",
        "description": "The message's attributes: flow_id, flow, tenant, status, generation, "
        "event (and cleanup).",
    },
)
_SCALARS = {"integer": "INTEGER", "number": "FLOAT", "boolean": "BOOLEAN"}
_STRING_FORMATS = {"date-time": "TIMESTAMP", "date": "DATE"}


class SchemaError(ValueError):
    """Raised when a JSON Schema cannot become a table (a property named as a metadata column)."""


def table_schema(schema: Mapping[str, Any]) -> list[Column]:
    """The table's columns for messages ``schema`` describes, then the metadata columns."""
    defs: Mapping[str, Any] = schema.get("$defs", {})
    columns = [column(name, prop, defs) for name, prop in schema["properties"].items()]
    clash = sorted({c["name"] for c in columns} & {m["name"] for m in METADATA})
    if clash:
        raise SchemaError(
            f"the message's {', '.join(clash)} would collide with Pub/Sub's metadata columns"
        )
    return [*columns, *(dict(m) for m in METADATA)]


def column(
    name: str, prop: Mapping[str, Any], defs: Mapping[str, Any], seen: frozenset[str] = frozenset()
) -> Column:
    """One property's column (a RECORD's columns within it)."""
    shape, seen = _resolved(prop, defs, seen)
    mode = "NULLABLE"
    if shape.get("type") == "array" and _is_plain(shape.get("items"), defs, seen):
        shape, seen = _resolved(shape["items"], defs, seen)
        mode = "REPEATED"
    found: Column = {"name": name, "type": _type(shape), "mode": mode}
    if found["type"] == "RECORD":
        found["fields"] = [column(n, p, defs, seen) for n, p in shape["properties"].items()]
    description = prop.get("description")
    if description:
        found["description"] = " ".join(description.split())[:MAX_DESCRIPTION]
    return found


def _resolved(
    prop: Mapping[str, Any], defs: Mapping[str, Any], seen: frozenset[str]
) -> tuple[Mapping[str, Any], frozenset[str]]:
    """``prop`` with a nullable ``anyOf`` reduced to its one other member and a ``$ref``
    followed; a reference already followed on the way here (a recursive type) stays a ref."""
    options = prop.get("anyOf")
    if options is not None:
        others = [o for o in options if o.get("type") != "null"]
        if len(others) != 1:
            return {"anyOf": others}, seen
        return _resolved(others[0], defs, seen)
    ref = prop.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        name = ref.removeprefix("#/$defs/")
        if name in seen:
            return {}, seen  # a type within itself: kept whole, as JSON
        return _resolved(defs[name], defs, seen | {name})
    return prop, seen


def _is_plain(items: Any, defs: Mapping[str, Any], seen: frozenset[str]) -> bool:
    """Whether an array's items can be a REPEATED column: not null, not arrays themselves."""
    if not isinstance(items, Mapping):
        return False
    options = items.get("anyOf", [])
    if any(o.get("type") == "null" for o in options):
        return False  # BigQuery stores no NULL inside an array
    shape, _ = _resolved(items, defs, seen)
    return shape.get("type") != "array"


def _type(shape: Mapping[str, Any]) -> str:
    kind = shape.get("type")
    if kind == "string":
        return _STRING_FORMATS.get(shape.get("format", ""), "STRING")
    if isinstance(kind, str) and kind in _SCALARS:
        return _SCALARS[kind]
    if kind == "object" and shape.get("properties"):
        return "RECORD"
    return "JSON"  # free-form objects, maps, several types, anything else: kept whole


def render(columns: list[Column]) -> str:
    """The table file's text (``bq`` and Terraform's ``schema`` read this JSON)."""
    return json.dumps(columns, indent=2, ensure_ascii=False) + "\n"


__all__ = ["METADATA", "TABLE_FILE", "Column", "SchemaError", "column", "render", "table_schema"]

"""The BigQuery table result events land in is the result event's schema: the committed table
file is what ``relayflow.schemas.bigquery`` derives from it, every field of a real event has a
column that takes its value, and the derivation maps each JSON Schema shape as it says."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from relayflow.core.position import Position, TaskKind
from relayflow.core.records import CleanupState, Result
from relayflow.core.result_events import result_event
from relayflow.core.state import Status
from relayflow.schemas import SCHEMAS, bigquery
from relayflow.schemas.__main__ import main
from tests.unit.test_result_events import NOW, ended

EVENT_SCHEMA = SCHEMAS["result-event"]


def committed_table() -> list[dict[str, Any]]:
    table: list[dict[str, Any]] = json.loads(bigquery.TABLE_FILE.read_text(encoding="utf-8"))
    return table


def test_the_committed_table_is_what_the_result_event_schema_yields() -> None:
    derived = bigquery.table_schema(EVENT_SCHEMA.committed())
    assert committed_table() == derived, (
        f"{bigquery.TABLE_FILE.name} is out of date: run python -m relayflow.schemas --write"
    )


def test_the_check_names_a_stale_table(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stale = tmp_path / "result-events.table.json"
    stale.write_text("[]\n", encoding="utf-8")
    monkeypatch.setattr(bigquery, "TABLE_FILE", stale)
    assert main([]) == 1
    assert "out of date: result-events.table.json" in capsys.readouterr().out
    assert main(["--write"]) == 0
    assert json.loads(stale.read_text(encoding="utf-8")) == committed_table()


def test_every_result_event_field_and_the_pubsub_metadata_has_a_column() -> None:
    names = [c["name"] for c in committed_table()]
    assert len(names) == len(set(names))
    assert set(EVENT_SCHEMA.committed()["properties"]) | {
        "subscription_name",
        "message_id",
        "publish_time",
        "attributes",
    } == set(names)


def events() -> list[dict[str, Any]]:
    """Real events, between them with every field set: a success with its output, a failure
    with its error and a pending clean-up that names where it came from."""
    succeeded = ended().model_copy(
        update={
            "status": Status.SUCCEEDED,
            "result": Result(status=Status.SUCCEEDED, code="OK", message="ok", data={"n": [1]}),
            "finished_at": NOW + timedelta(seconds=3),
            "polls": 4,
            "attempts": 2,
        }
    )
    failed = ended(CleanupState.PENDING)
    assert failed.cleanup is not None
    origin = Position(step_index=1, step="pay", kind=TaskKind.COMPENSATE, scope=None, item=None)
    cleanup = failed.cleanup.model_copy(update={"from_position": origin, "finished_at": NOW})
    failed = failed.model_copy(update={"cleanup": cleanup, "finished_at": NOW})
    return [result_event(succeeded), result_event(failed)]


def takes(column: dict[str, Any], value: Any) -> bool:
    """Whether BigQuery's JSON writer takes ``value`` into ``column`` (Storage Write API, as a
    BigQuery subscription writes)."""
    if value is None:
        return column["mode"] != "REQUIRED"
    if column["mode"] == "REPEATED":
        return isinstance(value, list) and all(
            takes({**column, "mode": "NULLABLE"}, v) for v in value
        )
    return TYPES[column["type"]](column, value)


def _timestamp(value: Any) -> bool:
    """An RFC 3339 time with its zone, as pydantic writes a datetime in UTC."""
    try:
        return isinstance(value, str) and datetime.fromisoformat(value).tzinfo is not None
    except ValueError:
        return False


def _record(column: dict[str, Any], value: Any) -> bool:
    fields = {f["name"]: f for f in column["fields"]}
    return isinstance(value, dict) and all(
        k in fields and takes(fields[k], v) for k, v in value.items()
    )


TYPES = {
    "STRING": lambda _, v: isinstance(v, str),
    "INTEGER": lambda _, v: isinstance(v, int) and not isinstance(v, bool),
    "FLOAT": lambda _, v: isinstance(v, int | float) and not isinstance(v, bool),
    "BOOLEAN": lambda _, v: isinstance(v, bool),
    "TIMESTAMP": lambda _, v: _timestamp(v),
    "JSON": lambda _, v: True,
    "RECORD": _record,
}


@pytest.mark.parametrize("index", [0, 1], ids=["succeeded", "failed-with-cleanup"])
def test_every_field_of_a_real_event_has_a_column_that_takes_its_value(index: int) -> None:
    columns = {c["name"]: c for c in committed_table()}
    event = events()[index]
    for name, value in event.items():
        assert name in columns, f"the event's {name} has no column"
        assert takes(columns[name], value), (name, columns[name]["type"], value)


def test_the_events_checked_set_every_field_between_them() -> None:
    # So that the check above saw a value in every column, not only NULLs.
    set_somewhere = {k for e in events() for k, v in e.items() if v is not None}
    assert set_somewhere == set(EVENT_SCHEMA.committed()["properties"])


def test_a_value_of_the_wrong_type_is_refused_by_the_check() -> None:
    columns = {c["name"]: c for c in committed_table()}
    assert not takes(columns["version"], "3")
    assert not takes(columns["created_at"], "yesterday")
    assert not takes(columns["cleanup"], {"state": "done", "nope": 1})


# --- The derivation, shape by shape -------------------------------------------------------------


class Inner(BaseModel):
    at: datetime
    tags: list[str] = []


class Shapes(BaseModel):
    labels: dict[str, str] = {}
    free: dict[str, Any] | None = None
    inner: Inner | None = None
    count: int
    ratio: float = 0.0
    flag: bool = False
    either: int | str = 0
    grid: list[list[int]] = []
    maybe_items: list[int | None] = []


def derived(model: type[BaseModel]) -> dict[str, dict[str, Any]]:
    columns = bigquery.table_schema(model.model_json_schema())
    return {c["name"]: c for c in columns}


def test_each_json_schema_shape_becomes_its_column_type() -> None:
    columns = derived(Shapes)
    kinds = {name: (c["type"], c["mode"]) for name, c in columns.items()}
    assert kinds == {
        # A string-to-string map (the result event's labels) is kept whole, as JSON: a
        # BigQuery subscription writes a message's object into a JSON column as it is.
        "labels": ("JSON", "NULLABLE"),
        "free": ("JSON", "NULLABLE"),
        "inner": ("RECORD", "NULLABLE"),
        "count": ("INTEGER", "NULLABLE"),
        "ratio": ("FLOAT", "NULLABLE"),
        "flag": ("BOOLEAN", "NULLABLE"),
        "either": ("JSON", "NULLABLE"),
        "grid": ("JSON", "NULLABLE"),  # BigQuery has no array of arrays
        "maybe_items": ("JSON", "NULLABLE"),  # nor a NULL inside an array
        **{m["name"]: (m["type"], m["mode"]) for m in bigquery.METADATA},
    }
    inner = {f["name"]: (f["type"], f["mode"]) for f in columns["inner"]["fields"]}
    assert inner == {"at": ("TIMESTAMP", "NULLABLE"), "tags": ("STRING", "REPEATED")}


class Node(BaseModel):
    name: str
    children: list[Node] = []


class Tree(BaseModel):
    root: Node


def test_a_type_within_itself_is_kept_whole() -> None:
    root = derived(Tree)["root"]
    assert root["type"] == "RECORD"
    (name, children) = root["fields"]
    assert (name["type"], children["type"], children["mode"]) == ("STRING", "JSON", "REPEATED")


class Clashing(BaseModel):
    message_id: str


def test_a_field_named_as_a_metadata_column_is_refused() -> None:
    with pytest.raises(bigquery.SchemaError, match="message_id would collide"):
        derived(Clashing)

"""The committed JSON Schemas are their models' (``python -m relayflow.schemas --write`` makes
them so), and say what the models accept."""

from __future__ import annotations

from pathlib import Path

import pytest

from relayflow.core.records import CleanupState
from relayflow.core.result_events import ResultEvent, result_event
from relayflow.schemas import SCHEMAS, render
from relayflow.schemas.__main__ import main
from tests.unit.test_result_events import ended


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_each_committed_schema_is_what_its_model_generates(name: str) -> None:
    published = SCHEMAS[name]
    assert published.path.read_text(encoding="utf-8") == render(published.generated()), (
        f"{published.file_name} is out of date: run python -m relayflow.schemas --write"
    )


def test_the_check_names_a_stale_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([]) == 0
    monkeypatch.setattr("relayflow.schemas.HERE", tmp_path)
    assert main([]) == 1
    assert (
        "out of date: start-message.v1.json, result-event.v1.json, signal-message.v1.json"
        in capsys.readouterr().out
    )


def test_the_start_message_schema_requires_flow_and_input_and_refuses_unknown_fields() -> None:
    schema = SCHEMAS["start-message"].committed()
    assert schema["required"] == ["flow", "input"]
    assert schema["additionalProperties"] is False
    assert {"flow", "input", "flow_id", "deadline_s", "tenant", "priority"} <= set(
        schema["properties"]
    )
    assert schema["properties"]["priority"]["anyOf"][0]["enum"] == ["high", "low"]


@pytest.mark.parametrize("cleanup", [None, CleanupState.PENDING, CleanupState.DONE])
def test_every_result_event_is_built_through_its_published_model(
    cleanup: CleanupState | None,
) -> None:
    event = result_event(ended(cleanup))
    assert ResultEvent.model_validate(event).model_dump(mode="json") == event
    schema = SCHEMAS["result-event"].committed()
    assert set(event) == set(schema["properties"])
    assert set(schema["required"]) <= set(event)

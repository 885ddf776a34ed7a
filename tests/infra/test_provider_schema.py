"""Resource arguments, blocks and attribute reads checked against the google provider schema.

The schema (google provider 6.50.0, from @cdktf/provider-google 16.12.1) is committed in
data/google-provider-schema.json, so this runs offline; provider_schema.py refreshes it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from provider_schema import (
    JSII_FILE,
    SCHEMA_FILE,
    check_body,
    check_references,
    extract,
    used_types,
)
from tfconfig import all_dirs, load, strings

PATHS = all_dirs()
IDS = [f"{p.parent.name}/{p.name}" for p in PATHS]


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    return data


def test_the_schema_is_of_the_pinned_provider_major(schema: dict[str, Any]) -> None:
    assert schema["provider_version"].startswith("6.")


def test_every_type_in_use_is_in_the_committed_schema(schema: dict[str, Any]) -> None:
    missing = {(k, t) for k, t in used_types() if t not in schema[k]}
    assert not missing, f"refresh the schema (see provider_schema.py): {sorted(missing)}"


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_blocks_use_only_arguments_and_blocks_the_provider_has(
    path: Path, schema: dict[str, Any]
) -> None:
    config = load(path)
    problems = []
    for block in config.resources + config.data:
        entry = schema[block.kind][block.type]
        problems += check_body(block.body, entry, f"{block.kind}.{block.address}")
    assert problems == []


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_attribute_reads_exist_on_their_types(path: Path, schema: dict[str, Any]) -> None:
    config = load(path)
    problems = [
        p
        for doc in config.files.values()
        for s in strings(doc)
        for p in check_references(s, schema)
    ]
    assert problems == []


def test_the_checker_catches_a_misspelt_argument_and_a_missing_required_one(
    schema: dict[str, Any],
) -> None:
    topic = {"name": "t", "labelz": {}, "__is_block__": True}
    problems = check_body(topic, schema["resource"]["google_pubsub_topic"], "t")
    assert problems == ["t.labelz: no such argument or block"]
    queue = {"location": "l", "rate_limits": {"max_concurrent_dispatches": 1}}
    problems = check_body(queue, schema["resource"]["google_cloud_tasks_queue"], "q")
    assert sorted(problems) == [
        "q.rate_limits: is a block, written as an argument",
        "q: missing required name",
    ]


@pytest.mark.skipif(not JSII_FILE.exists(), reason="npm ci --prefix tests/infra/provider-schema")
def test_the_committed_schema_matches_the_npm_package(schema: dict[str, Any]) -> None:
    fresh = extract(json.loads(JSII_FILE.read_text(encoding="utf-8")), used_types())
    assert json.loads(json.dumps(fresh)) == schema

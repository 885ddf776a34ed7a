"""Every block, argument, value and reference checked against the google provider schemas.

The schemas (google and google-beta 6.50.0, from @cdktf/provider-google{,-beta} 16.12.1) are
committed in data/google-provider-schema.json, so this runs offline; provider_schema.py
refreshes them. Together these tests stand in for ``terraform validate``, which cannot run here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from provider_schema import (
    ASSEMBLIES,
    SCHEMA_FILE,
    Scope,
    check_body,
    check_references,
    entry_for,
    extract,
    load_schema,
    provider_of,
    used_types,
)
from tfconfig import Config, all_dirs, load, strings

PATHS = all_dirs()
IDS = [f"{p.parent.name}/{p.name}" for p in PATHS]


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return load_schema()


def _scope(config: Config) -> Scope:
    return Scope({n: v.body for n, v in config.variables.items()}, config.locals)


def _declared(config: Config) -> set[str]:
    return {b.address for b in config.resources} | {f"data.{b.address}" for b in config.data}


def test_the_schemas_are_of_the_pinned_provider_major(schema: dict[str, Any]) -> None:
    assert schema["google"]["provider_version"].startswith("6.")
    assert schema["google-beta"]["provider_version"] == schema["google"]["provider_version"]


def test_every_type_in_use_is_in_the_committed_schema(schema: dict[str, Any]) -> None:
    missing = {(p, k, t) for p, k, t in used_types() if not entry_for(schema, p, k, t)}
    assert not missing, f"refresh the schema (see provider_schema.py): {sorted(missing)}"


def test_google_beta_serves_only_what_the_ga_provider_lacks(schema: dict[str, Any]) -> None:
    beta_only = {t for p, _, t in used_types() if p == "google-beta"}
    assert beta_only == {"google_project_service_identity"}
    assert "google_project_service_identity" not in schema["google"]["resource"]


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_blocks_use_only_arguments_blocks_types_and_values_the_provider_allows(
    path: Path, schema: dict[str, Any]
) -> None:
    config = load(path)
    problems = []
    for block in config.resources + config.data:
        entry = entry_for(schema, provider_of(block.body, block.type), block.kind, block.type)
        assert entry, block.address
        problems += check_body(block.body, entry, f"{block.kind}.{block.address}", _scope(config))
    assert problems == []


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_every_resource_reference_is_declared_and_reads_an_existing_attribute(
    path: Path, schema: dict[str, Any]
) -> None:
    config = load(path)
    declared = _declared(config)
    problems = [
        p
        for doc in config.files.values()
        for s in strings(doc)
        for p in check_references(s, schema, declared)
    ]
    assert problems == []


# --- The checker catches what it claims to ---------------------------------------------------


def test_the_checker_catches_a_misspelt_argument_and_a_missing_required_one(
    schema: dict[str, Any],
) -> None:
    topic = {"name": "t", "labelz": {}, "__is_block__": True}
    problems = check_body(topic, schema["google"]["resource"]["google_pubsub_topic"], "t")
    assert problems == ["t.labelz: no such argument or block"]
    queue = {"location": "l", "rate_limits": {"max_concurrent_dispatches": 1}}
    problems = check_body(queue, schema["google"]["resource"]["google_cloud_tasks_queue"], "q")
    assert sorted(problems) == [
        "q.rate_limits: is a block, written as an argument",
        "q: missing required name",
    ]


def test_the_checker_catches_values_of_the_wrong_type(schema: dict[str, Any]) -> None:
    topic = schema["google"]["resource"]["google_pubsub_topic"]
    assert check_body({"name": ["a"]}, topic, "t") == [
        "t.name: a list where the provider expects string"
    ]
    assert check_body({"name": "t", "labels": "x"}, topic, "t") == [
        "t.labels: a string where the provider expects map(string)"
    ]
    sub = schema["google"]["resource"]["google_pubsub_subscription"]
    scope = Scope({"flag": {"type": "${bool}"}})
    body = {"name": "s", "topic": "t", "ack_deadline_seconds": "${var.flag}"}
    assert check_body(body, sub, "s", scope) == [
        "s.ack_deadline_seconds: a bool where the provider expects number"
    ]
    assert check_body({**body, "ack_deadline_seconds": "soon"}, sub, "s") == [
        "s.ack_deadline_seconds: 'soon' is not a number"
    ]


def test_the_checker_catches_values_outside_the_allowed_ones(schema: dict[str, Any]) -> None:
    database = schema["google"]["resource"]["google_firestore_database"]
    body = {"name": "(default)", "location_id": "nam5", "type": "FIRESTORE"}
    assert check_body(body, database, "d") == [
        "d.type: 'FIRESTORE' is not one of ['FIRESTORE_NATIVE', 'DATASTORE_MODE']"
    ]
    body["type"] = '${var.native ? "FIRESTORE_NATIVE" : "DATASTORE"}'
    assert len(check_body(body, database, "d")) == 1
    service = schema["google"]["resource"]["google_cloud_run_v2_service"]["attributes"]
    assert service["ingress"]["allowed"]
    scope = Scope(
        {
            "ingress": {
                "type": "${string}",
                "validation": [{"condition": 'contains(["PUBLIC"], var.ingress)'}],
            }
        }
    )
    from provider_schema import check_value

    assert check_value("${var.ingress}", service["ingress"], "s.ingress", scope) == [
        f"s.ingress: 'PUBLIC' is not one of {service['ingress']['allowed']}"
    ]


def test_the_checker_catches_a_block_repeated_that_may_appear_once(schema: dict[str, Any]) -> None:
    queue = schema["google"]["resource"]["google_cloud_tasks_queue"]
    once = {"max_attempts": 1, "__is_block__": True}
    body = {"name": "q", "location": "l", "retry_config": [once, once]}
    assert check_body(body, queue, "q") == ["q.retry_config: allowed once, written 2 times"]
    dynamic = {"retry_config": {"for_each": "${var.retries}", "content": [once]}}
    body = {"name": "q", "location": "l", "dynamic": [dynamic]}
    assert check_body(body, queue, "q") == [
        "q.dynamic.retry_config: allowed once, but for_each is not a zero-or-one conditional"
    ]


def test_the_checker_catches_an_undeclared_reference_and_an_unknown_attribute(
    schema: dict[str, Any],
) -> None:
    declared = {"google_pubsub_topic.main"}
    assert check_references("${google_pubsub_topic.mian.id}", schema, declared) == [
        "google_pubsub_topic.mian: not declared in this configuration"
    ]
    assert check_references('${google_pubsub_topic.main["x"].idd}', schema, declared) == [
        "google_pubsub_topic.main.idd: no such attribute"
    ]


@pytest.mark.skipif(
    not all(f.exists() for _, f in ASSEMBLIES.values()),
    reason="npm ci --prefix tests/infra/provider-schema",
)
def test_the_committed_schema_matches_the_npm_packages(schema: dict[str, Any]) -> None:
    committed = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    for provider, (assembly, jsii_file) in ASSEMBLIES.items():
        types = {(k, t) for p, k, t in used_types() if p == provider}
        fresh = extract(json.loads(jsii_file.read_text(encoding="utf-8")), types, assembly)
        assert json.loads(json.dumps(fresh)) == committed[provider], provider

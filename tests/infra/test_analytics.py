"""Result events in BigQuery (infra/terraform/modules/analytics): the table is the committed
schema relayflow derives from the result event, partitioned by the day of publish_time and
dropped after the retention; the BigQuery subscription on the results topic writes each event's
fields into their columns with the message's metadata, dead-letters what it cannot write to a
topic whose hold keeps it, and writes as the Pub/Sub agent, granted on the table alone.
Names come from relayflow/topology.json; each environment may turn it off."""

from __future__ import annotations

import json
import re

from tfconfig import ENVS, MODULES, load, only_block, topology

from relayflow.schemas import bigquery

ANALYTICS = MODULES / "analytics"
RELAYFLOW = MODULES / "relayflow"


def _table() -> dict[str, object]:
    return load(ANALYTICS).resource("google_bigquery_table", "main").body


def _columns() -> dict[str, dict[str, object]]:
    return {c["name"]: c for c in json.loads(bigquery.TABLE_FILE.read_text(encoding="utf-8"))}


def test_the_table_schema_is_the_file_relayflow_generates() -> None:
    match = re.fullmatch(r'\$\{file\("\$\{path\.module\}/([^"]+)"\)\}', str(_table()["schema"]))
    assert match, _table()["schema"]
    assert (ANALYTICS / match.group(1)).resolve() == bigquery.TABLE_FILE


def test_the_table_is_partitioned_by_the_publish_day_and_kept_for_the_retention() -> None:
    partitioning = only_block(_table(), "time_partitioning")
    assert partitioning["type"] == "DAY"
    assert partitioning["field"] == "publish_time"
    assert _columns()["publish_time"]["type"] == "TIMESTAMP"
    assert partitioning["expiration_ms"] == "${var.retention_days * 86400000}"
    assert set(_table()["clustering"]) <= set(_columns())


def test_the_subscription_writes_each_field_into_its_column_with_the_metadata() -> None:
    subscription = load(ANALYTICS).resource("google_pubsub_subscription", "main").body
    config = only_block(subscription, "bigquery_config")
    assert config["table"] == "${local.table}"
    assert config["use_table_schema"] is True and config["write_metadata"] is True
    assert config["drop_unknown_fields"] is True
    assert "service_account_email" not in config, "the Pub/Sub agent writes, as granted below"
    dead = only_block(subscription, "dead_letter_policy")
    assert dead["dead_letter_topic"] == "${google_pubsub_topic.dead_letter.id}"
    assert dead["max_delivery_attempts"] == "${var.subscription.max_delivery_attempts}"
    assert only_block(subscription, "expiration_policy")["ttl"] == ""


def test_the_pubsub_agent_may_write_this_table_and_nothing_else_of_bigquery() -> None:
    module = load(ANALYTICS)
    grants = module.resources_of("google_bigquery_table_iam_member")
    assert [g.name for g in grants] == ["writer"]
    body = grants[0].body
    assert module.locals["writer_roles"] == (
        '${toset(["roles/bigquery.dataEditor", "roles/bigquery.metadataViewer"])}'
    )
    assert body["member"] == "${var.pubsub_service_agent}"
    assert body["table_id"] == "${google_bigquery_table.main.table_id}"
    assert not module.resources_of("google_bigquery_dataset_iam_member")
    assert not module.resources_of("google_project_iam_member")


def test_what_cannot_be_written_is_held_on_a_dead_letter_topic_of_its_own() -> None:
    analytics = topology()["analytics"]
    assert analytics["subscription"]["topic"] == topology()["topics"]["results"]
    assert analytics["subscription"]["dead_letter_topic"] == analytics["dead_letter"]["topic"]
    assert analytics["dead_letter"]["topic"] not in topology()["topics"].values()
    module = load(ANALYTICS)
    hold = module.resource("google_pubsub_subscription", "dead_letter_hold").body
    assert hold["topic"] == "${google_pubsub_topic.dead_letter.id}"
    publisher = module.resource("google_pubsub_topic_iam_member", "dead_letter_publisher").body
    assert (publisher["role"], publisher["member"]) == (
        "roles/pubsub.publisher",
        "${var.pubsub_service_agent}",
    )
    subscriber = module.resource("google_pubsub_subscription_iam_member", "dead_letter_subscriber")
    assert subscriber.body["subscription"] == "${google_pubsub_subscription.main.name}"


def test_the_relayflow_module_wires_it_from_the_topology_unless_turned_off() -> None:
    relayflow = load(RELAYFLOW)
    call = relayflow.modules["analytics"].body
    assert call["count"] == "${var.analytics.enabled ? 1 : 0}"
    assert call["results_topic_id"] == '${module.messaging.topic_ids["results"]}'
    for name in ("dataset", "table", "subscription", "dead_letter"):
        key = {"dataset": "dataset_id", "table": "table_id"}.get(name, name)
        assert call[key] == f"${{local.topology.analytics.{name}}}"
    assert call["pubsub_service_agent"] == "${google_project_service_identity.pubsub.member}"
    assert "bigquery.googleapis.com" in relayflow.locals["services"]
    # On by default, in the module and in every environment.
    assert "enabled = optional(bool, true)" in relayflow.variables["analytics"].body["type"]
    for env in ("dev", "staging", "prod"):
        root = load(ENVS / env)
        assert root.modules["relayflow"].body["analytics"] == "${var.analytics}"
        assert "enabled = optional(bool, true)" in root.variables["analytics"].body["type"]


def test_a_customer_managed_key_can_be_named_for_the_dataset_and_the_table() -> None:
    module = load(ANALYTICS)
    assert module.variables["kms_key_name"].body["default"] is None
    dataset = module.resource("google_bigquery_dataset", "main").body
    for body, block in (
        (dataset, "default_encryption_configuration"),
        (_table(), "encryption_configuration"),
    ):
        (dynamic,) = [d[block] for d in body["dynamic"] if block in d]
        assert dynamic["for_each"] == "${var.kms_key_name == null ? [] : [var.kms_key_name]}"

"""The offload bucket (issue 24): payloads too large for a flow document, kept exactly as long as
the flows, private, written once by the components that produce them.

The figure that matters is one variable: ``retention_days`` is RELAYFLOW_RETENTION_DAYS for every
service (Firestore's TTL deletes a flow's document that long after it ended) and the age at which
the bucket's lifecycle deletes a payload.
"""

from __future__ import annotations

from typing import Any

from tfconfig import MODULES, blocks, env_dirs, load, only_block

RELAYFLOW = MODULES / "relayflow"
COMPONENTS = ("start_flow", "worker", "poller", "api")


def _bucket() -> dict[str, Any]:
    body: dict[str, Any] = load(MODULES / "offload").resource("google_storage_bucket", "main").body
    return body


def test_payloads_are_deleted_at_the_flows_retention_and_nothing_keeps_them_longer() -> None:
    bucket = _bucket()
    (rule,) = blocks(bucket, "lifecycle_rule")
    assert only_block(rule, "action") == {"type": "Delete", "__is_block__": True}
    condition = {k: v for k, v in only_block(rule, "condition").items() if k != "__is_block__"}
    assert condition == {"age": "${var.retention_days}"}
    # No noncurrent versions and no soft-deleted copies outlive the rule.
    assert only_block(bucket, "versioning")["enabled"] is False
    assert only_block(bucket, "soft_delete_policy")["retention_duration_seconds"] == 0


def test_the_bucket_and_the_services_take_the_retention_from_one_variable() -> None:
    relayflow = load(RELAYFLOW)
    assert relayflow.modules["offload"].body["retention_days"] == "${var.retention_days}"
    common = relayflow.locals["common_env"]
    assert common["RELAYFLOW_RETENTION_DAYS"] == "${tostring(var.retention_days)}"
    variable = relayflow.variables["retention_days"].body
    # relayflow's own default (relayflow.settings.Settings.retention_days).
    assert variable["default"] == 30
    for path in env_dirs():
        env = load(path)
        assert env.variables["retention_days"].body["default"] == variable["default"], path.name
        assert env.modules["relayflow"].body["retention_days"] == "${var.retention_days}"


def test_whole_days_only_as_the_lifecycle_counts_them() -> None:
    for module in (RELAYFLOW, MODULES / "offload"):
        (validation,) = load(module).variables["retention_days"].body["validation"]
        assert "floor(var.retention_days) == var.retention_days" in validation["condition"]


def test_the_bucket_is_private_uniform_and_never_force_destroyed() -> None:
    bucket = _bucket()
    assert bucket["uniform_bucket_level_access"] is True
    assert bucket["public_access_prevention"] == "enforced"
    assert bucket["force_destroy"] is False
    relayflow = load(RELAYFLOW).modules["offload"].body
    assert relayflow["location"] == "${var.region}"
    assert (
        relayflow["name"]
        == '${coalesce(var.offload_bucket_name, "${var.project_id}-relayflow-offload")}'
    )


def test_every_service_is_told_the_bucket_and_may_write_and_read_it_but_not_replace() -> None:
    relayflow = load(RELAYFLOW)
    assert relayflow.locals["common_env"]["RELAYFLOW_OFFLOAD_BUCKET"] == "${module.offload.name}"
    for call in COMPONENTS:
        env = relayflow.modules[call].body["env"]
        assert "local.common_env" in env or "local.handler_env" in env, call
    grants = {
        r.body["role"]: r.body
        for r in relayflow.resources
        if r.type == "google_storage_bucket_iam_member"
    }
    # objectCreator creates and cannot overwrite or delete (that takes storage.objects.delete).
    assert set(grants) == {"roles/storage.objectCreator", "roles/storage.objectViewer"}
    for grant in grants.values():
        assert grant["bucket"] == "${module.offload.name}"
        assert grant["for_each"] == "${local.runtime_members}"
    # A component serves only once it holds them (push subscriptions, scheduler jobs).
    ids = relayflow.locals["runtime_grant_ids"]
    for name in ("offload_creator", "offload_viewer"):
        assert f"google_storage_bucket_iam_member.{name}" in ids

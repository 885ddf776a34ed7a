"""The bootstrap: state bucket, image repository, the build's account and its roles, triggers.

Applied once per environment by a person; everything a build does afterwards runs as the
account created here, so its roles are exactly what `terraform apply` of an environment needs.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from tfconfig import BOOTSTRAP, MODULES, REPO, all_dirs, load, only_block

BOOT = MODULES / "bootstrap"

# The role `terraform apply` needs for each resource type an environment declares (and actAs on
# the identity a resource runs as or signs tokens for).
ROLE_FOR_TYPE = {
    "google_project_service": "roles/serviceusage.serviceUsageAdmin",
    "google_project_service_identity": "roles/serviceusage.serviceUsageAdmin",
    "google_service_account": "roles/iam.serviceAccountAdmin",
    "google_service_account_iam_member": "roles/iam.serviceAccountAdmin",
    "google_project_iam_member": "roles/resourcemanager.projectIamAdmin",
    "google_cloud_run_v2_service": "roles/run.admin",
    "google_cloud_run_v2_service_iam_member": "roles/run.admin",
    "google_pubsub_topic": "roles/pubsub.admin",
    "google_pubsub_topic_iam_member": "roles/pubsub.admin",
    "google_pubsub_subscription": "roles/pubsub.admin",
    "google_pubsub_subscription_iam_member": "roles/pubsub.admin",
    "google_cloud_tasks_queue": "roles/cloudtasks.admin",
    "google_cloud_tasks_queue_iam_member": "roles/cloudtasks.admin",
    "google_cloud_scheduler_job": "roles/cloudscheduler.admin",
    "google_firestore_database": "roles/datastore.owner",
    "google_firestore_index": "roles/datastore.owner",
    "google_firestore_field": "roles/datastore.owner",
    "google_monitoring_alert_policy": "roles/monitoring.alertPolicyEditor",
    "google_monitoring_dashboard": "roles/monitoring.dashboardEditor",
    "google_monitoring_metric_descriptor": "roles/monitoring.metricWriter",
    "terraform_data": None,
}
# Creating these makes Google act as another account (a revision's identity, a push or job
# OIDC token): iam.serviceAccounts.actAs.
ACTS_AS = {
    "google_cloud_run_v2_service",
    "google_pubsub_subscription",
    "google_cloud_scheduler_job",
}
# Not tied to a resource type: a build running as a user-specified account writes its own logs.
FOR_THE_BUILD_ITSELF = {"roles/logging.logWriter"}


def _build_roles() -> dict[str, Any]:
    roles: dict[str, Any] = load(BOOT).locals["build_roles"]
    return roles


def _environment_types() -> set[str]:
    """Resource types an environment's apply creates (every module but the bootstrap)."""
    return {
        r.type
        for path in all_dirs()
        if path.name != "bootstrap" and path.parent.name != "bootstrap"
        for r in load(path).resources
    }


def test_the_bootstrap_root_is_thin_and_keeps_its_state_in_the_bucket_it_creates() -> None:
    root = load(BOOTSTRAP)
    assert root.resources == [] and root.data == []
    (call,) = root.modules.values()
    assert (BOOTSTRAP / call.body["source"]).resolve() == BOOT.resolve()
    (backend,) = [b for t in root.terraform for b in t.get("backend", [])]
    settings = {k: v for k, v in backend["gcs"].items() if k != "__is_block__"}
    assert settings == {}, "bucket and prefix given at init: bucket names are global"
    for env in ("dev", "staging", "prod"):
        assert (BOOTSTRAP / f"{env}.tfvars.example").exists()


def test_the_state_bucket_is_versioned_uniform_private_and_named_by_a_variable() -> None:
    bucket = load(BOOT).resource("google_storage_bucket", "main").body
    assert bucket["name"] == "${var.state_bucket_name}"
    assert only_block(bucket, "versioning")["enabled"] is True
    assert bucket["uniform_bucket_level_access"] is True
    assert bucket["public_access_prevention"] == "enforced"
    assert bucket["force_destroy"] is False
    # The build's environment check reads this label.
    assert "relayflow-env = var.environment" in bucket["labels"]


def test_the_image_repository_has_a_cleanup_policy_and_immutable_tags() -> None:
    repo = load(BOOT).resource("google_artifact_registry_repository", "images").body
    assert repo["format"] == "DOCKER"
    assert repo["cleanup_policy_dry_run"] is False
    policies = {p["id"]: p for p in repo["cleanup_policies"]}
    assert policies["keep-recent"]["action"] == "KEEP"
    assert only_block(policies["keep-recent"], "most_recent_versions")["keep_count"]
    assert policies["delete-old"]["action"] == "DELETE"
    assert only_block(policies["delete-old"], "condition")["older_than"]
    assert only_block(repo, "docker_config")["immutable_tags"] is True


def test_the_build_has_one_dedicated_account_per_environment() -> None:
    boot = load(BOOT)
    (account,) = boot.resources_of("google_service_account")
    assert account.body["account_id"] == "relayflow-build"
    for trigger in boot.resources_of("google_cloudbuild_trigger"):
        assert trigger.body["service_account"] == "${google_service_account.build.id}"


def test_the_build_roles_are_exactly_what_an_environment_apply_needs() -> None:
    types = _environment_types()
    assert types <= set(ROLE_FOR_TYPE), f"say which role creates {types - set(ROLE_FOR_TYPE)}"
    needed = {ROLE_FOR_TYPE[t] for t in types} - {None}
    if types & ACTS_AS:
        needed.add("roles/iam.serviceAccountUser")
    assert set(_build_roles()) == needed | FOR_THE_BUILD_ITSELF


def test_each_build_role_is_justified_in_place() -> None:
    text = (BOOT / "main.tf").read_text(encoding="utf-8")
    for role in _build_roles():
        line = re.search(rf'^(.*)\n\s*"{re.escape(role)}"\s*=', text, re.M)
        assert line, role
        previous = line.group(1).strip()
        # A comment right above, or the role shares the comment of the group it follows.
        assert previous.startswith("#") or previous.startswith('"roles/'), role


def test_project_iam_admin_may_grant_only_the_roles_relayflow_grants_per_project() -> None:
    condition = _build_roles()["roles/resourcemanager.projectIamAdmin"]
    granted = set(re.findall(r"'(roles/[\w.]+)'", condition["expression"]))
    relayflow_project_roles = {
        r.body["role"]
        for r in load(MODULES / "relayflow").resources
        if r.type == "google_project_iam_member"
    }
    assert granted == relayflow_project_roles
    assert (
        "modifiedGrantsByRole" in condition["expression"] and "hasOnly" in condition["expression"]
    )
    assert all(
        v is None for k, v in _build_roles().items() if k != "roles/resourcemanager.projectIamAdmin"
    )


def test_no_primitive_or_security_admin_role_is_granted() -> None:
    forbidden = {"roles/owner", "roles/editor", "roles/iam.securityAdmin", "roles/iam.roleAdmin"}
    assert not forbidden & set(_build_roles())


def test_state_and_images_are_granted_on_their_resource_not_the_project() -> None:
    boot = load(BOOT)
    state = boot.resource("google_storage_bucket_iam_member", "build_state").body
    assert state["bucket"] == "${google_storage_bucket.main.name}"
    assert state["role"] == "roles/storage.objectAdmin"
    writer = boot.resource("google_artifact_registry_repository_iam_member", "build_writer").body
    assert writer["repository"] == "${google_artifact_registry_repository.images.name}"
    assert writer["role"] == "roles/artifactregistry.writer"
    assert "roles/storage.objectAdmin" not in _build_roles()
    assert "roles/artifactregistry.writer" not in _build_roles()


EXPECTED_TRIGGERS = {
    "dev": {"build": ("cloudbuild.yaml", True, False)},
    "staging": {"promote": ("deploy/cloudbuild/promote.yaml", False, False)},
    "prod": {
        "plan": ("deploy/cloudbuild/promote.yaml", False, False),
        "apply": ("deploy/cloudbuild/apply.yaml", False, True),
    },
}


@pytest.mark.parametrize("env", sorted(EXPECTED_TRIGGERS))
def test_each_environment_gets_its_triggers_and_only_prod_applies_after_approval(env: str) -> None:
    triggers = load(BOOT).locals["triggers"][env]
    found = {k: (t["file"], t["on_push"], t["approval"]) for k, t in triggers.items()}
    assert found == EXPECTED_TRIGGERS[env]
    for file, _, _ in found.values():
        assert (REPO / file).exists(), file


def test_triggers_pass_the_environment_its_bucket_and_approval() -> None:
    trigger = load(BOOT).resource("google_cloudbuild_trigger", "main").body
    assert trigger["for_each"] == "${local.triggers[var.environment]}"
    assert only_block(trigger, "approval_config")["approval_required"] == "${each.value.approval}"
    common = load(BOOT).locals["common_substitutions"]
    assert common["_ENV"] == "${var.environment}"
    assert common["_TF_STATE_BUCKET"] == "${google_storage_bucket.main.name}"

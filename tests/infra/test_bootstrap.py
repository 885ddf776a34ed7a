"""The bootstrap: state bucket, image repository, relayflow's accounts, the build's account and
its roles, the test build's account, triggers.

Applied once per environment by a person; everything a build does afterwards runs as the
accounts created here: the build's roles are exactly what `terraform apply` of an environment
needs (over service accounts, on each account alone), and the tests run as an account of their
own that can reach nothing that deploys.
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
    "google_storage_bucket": "roles/storage.admin",
    "google_storage_bucket_iam_member": "roles/storage.admin",
    "google_kms_key_ring": "roles/cloudkms.admin",
    "google_kms_crypto_key": "roles/cloudkms.admin",
    "google_kms_crypto_key_iam_member": "roles/cloudkms.admin",
    "google_monitoring_alert_policy": "roles/monitoring.alertPolicyEditor",
    "google_monitoring_dashboard": "roles/monitoring.dashboardEditor",
    "google_monitoring_metric_descriptor": "roles/monitoring.metricWriter",
    "terraform_data": None,
}
# Not tied to a resource type: a build running as a user-specified account writes its own logs,
# and the dev deploy reads how the test build of its commit ended (deploy/await-tests.sh).
FOR_THE_BUILD_ITSELF = {"roles/logging.logWriter", "roles/cloudbuild.builds.viewer"}
# Roles over service accounts that the build must never hold project-wide: each would reach
# every account of the project (actAs, keys, tokens, IAM on them).
SERVICE_ACCOUNT_ROLES = {
    "roles/iam.serviceAccountAdmin",
    "roles/iam.serviceAccountUser",
    "roles/iam.serviceAccountTokenCreator",
    "roles/iam.serviceAccountKeyAdmin",
}


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
    accounts = {a.name: a.body for a in boot.resources_of("google_service_account")}
    assert set(accounts) == {"build", "test", "relayflow"}
    assert accounts["build"]["account_id"] == "relayflow-build"
    assert accounts["test"]["account_id"] == "relayflow-test"
    trigger = boot.resource("google_cloudbuild_trigger", "main").body
    assert trigger["service_account"] == "${local.trigger_accounts[each.value.account]}"
    assert boot.locals["trigger_accounts"] == (
        "${merge({build = google_service_account.build.id}, {for a in google_service_account.test"
        ' : "test" => a.id})}'
    )
    for env, triggers in boot.locals["triggers"].items():
        for name, t in triggers.items():
            assert t["account"] == ("test" if name == "test" else "build"), (env, name)


def test_the_build_roles_are_exactly_what_an_environment_apply_needs() -> None:
    types = _environment_types()
    assert types <= set(ROLE_FOR_TYPE), f"say which role creates {types - set(ROLE_FOR_TYPE)}"
    needed = {ROLE_FOR_TYPE[t] for t in types} - {None}
    assert set(_build_roles()) == needed | FOR_THE_BUILD_ITSELF


def test_the_build_holds_no_role_over_every_service_account_of_the_project() -> None:
    # It used to hold serviceAccountAdmin and serviceAccountUser project-wide: actAs (and IAM)
    # on every account, the test tools' account and any later one included.
    assert not SERVICE_ACCOUNT_ROLES & set(_build_roles())
    project_grants = {r.body["role"] for r in load(BOOT).resources_of("google_project_iam_member")}
    assert not SERVICE_ACCOUNT_ROLES & project_grants
    # Nor does the environment's apply need any: it creates no account and sets no IAM on one.
    for t in ("google_service_account", "google_service_account_iam_member"):
        assert t not in _environment_types(), t


def _env_account_ids() -> dict[str, set[str]]:
    """The account ids envs/<env> runs or signs as (actAs), and those it only reads."""
    relayflow = load(MODULES / "relayflow")
    data = {
        d.name: d.body["account_id"] for d in relayflow.data if d.type == "google_service_account"
    }
    # The Cloud Run services run as their own accounts; the push subscriptions and the sweeper
    # job sign their OIDC tokens as one each.
    acted = {
        c.body["service_account_id"]
        for c in relayflow.modules.values()
        if "service_account_id" in c.body
    }
    job = relayflow.resource("google_cloud_scheduler_job", "sweep").body
    signers = (
        relayflow.modules["messaging"].body["push_service_account_email"],
        only_block(only_block(job, "http_target"), "oidc_token")["service_account_email"],
    )
    for signer in signers:
        (account,) = [
            a for n, a in data.items() if f"data.google_service_account.{n}.email" in signer
        ]
        acted.add(account)
    return {"acted": acted, "read": set(data.values()) - acted}


def test_the_build_acts_as_exactly_the_accounts_the_apply_runs_or_signs_as() -> None:
    boot = load(BOOT)
    identities = boot.locals["identities"]
    by_key = {k: v["account_id"] for k, v in identities.items()}
    env = _env_account_ids()
    assert set(by_key.values()) == env["acted"] | env["read"]
    acts = boot.resource("google_service_account_iam_member", "build_acts_as").body
    assert acts["for_each"] == "${toset(local.acted_as)}"
    assert acts["service_account_id"] == "${google_service_account.relayflow[each.key].name}"
    assert (acts["role"], acts["member"]) == (
        "roles/iam.serviceAccountUser",
        "${local.build_member}",
    )
    acted = set(boot.locals["runtime"]) | {"pubsub-push", "scheduler"}
    assert boot.locals["acted_as"] == '${concat(local.runtime, ["pubsub-push", "scheduler"])}'
    assert {by_key[k] for k in acted} == env["acted"]
    reads = boot.resource("google_service_account_iam_member", "build_reads").body
    assert reads["role"] == "roles/iam.serviceAccountViewer"
    assert reads["for_each"] == "${local.read_only}"
    assert {by_key[k] for k in set(identities) - acted} == env["read"] == {"relayflow-tasks"}


def test_the_bootstrap_grants_relayflows_accounts_what_the_env_no_longer_can() -> None:
    boot = load(BOOT)
    tasks = boot.resource("google_service_account_iam_member", "tasks_invoker_user").body
    assert (
        tasks["service_account_id"] == '${google_service_account.relayflow["tasks-invoker"].name}'
    )
    assert tasks["for_each"] == "${toset(local.runtime)}"
    assert tasks["member"] == "${google_service_account.relayflow[each.key].member}"
    assert set(boot.locals["runtime"]) == {"start-flow", "worker", "poller", "api"}
    token = boot.resource("google_service_account_iam_member", "pubsub_push_token_creator").body
    assert token["service_account_id"] == '${google_service_account.relayflow["pubsub-push"].name}'
    assert token["role"] == "roles/iam.serviceAccountTokenCreator"
    assert token["member"] == "${google_project_service_identity.pubsub.member}"
    assert "pubsub.googleapis.com" in boot.locals["services"]


def test_the_tests_run_as_an_account_that_can_reach_nothing_that_deploys() -> None:
    boot = load(BOOT)
    test = boot.resource("google_service_account", "test").body
    assert test["count"] == '${var.environment == "dev" ? 1 : 0}'
    granted = [
        r
        for r in boot.resources
        if r.type.endswith("_iam_member") and "google_service_account.test" in str(r.body)
    ]
    assert [(r.type, r.name, r.body["role"]) for r in granted] == [
        ("google_project_iam_member", "test_logs", "roles/logging.logWriter")
    ]
    # No state bucket, repository, account or trigger right; nor the environment's names.
    trigger = boot.resource("google_cloudbuild_trigger", "main").body
    assert trigger["substitutions"] == (
        '${merge(each.value.account == "build" ? local.common_substitutions : {}, '
        "each.value.extra)}"
    )
    (test_trigger,) = [t for t in boot.locals["triggers"]["dev"].values() if t["account"] == "test"]
    assert test_trigger["file"] == "deploy/cloudbuild/test.yaml" and test_trigger["on_push"]


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
    "dev": {
        "test": ("deploy/cloudbuild/test.yaml", True, False),
        "build": ("cloudbuild.yaml", True, False),
    },
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

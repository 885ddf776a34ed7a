"""Customer-managed encryption keys (issue 24): one option per environment puts every store of
flow data under a key of the team's, each key usable by its store's service agent alone.

With ``cmek.enabled`` the Firestore database, every Pub/Sub topic, the offload bucket and (by one
gcloud command, the provider having no resource for it) Cloud Tasks name their key; with it off
nothing of the kind exists and every store keeps Google-managed encryption. The locals that
decide this are run by Terraform itself where it is installed; that each store is created after
its agent may use its key is tests/infra/test_dependencies.py's.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from provider_schema import load_schema
from tfconfig import MODULES, TERRAFORM, env_dirs, load, only_block
from tfgraph import Graph
from tfprobe import block, local, needs_terraform, outputs, run, write_calls

RELAYFLOW = MODULES / "relayflow"
ENCRYPTER = "roles/cloudkms.cryptoKeyEncrypterDecrypter"
STORES = ("firestore", "pubsub", "tasks", "storage")
# Each store's service agent: the service identity of its API, or (Cloud Storage's) the data
# source that makes it exist.
AGENTS = {
    "firestore": "google_project_service_identity.firestore",
    "pubsub": "google_project_service_identity.pubsub",
    "tasks": "google_project_service_identity.cloudtasks",
    "storage": "data.google_storage_project_service_account.main",
}
AGENT_SERVICES = {
    "firestore": "firestore.googleapis.com",
    "pubsub": "pubsub.googleapis.com",
    "tasks": "cloudtasks.googleapis.com",
}
# Everything an environment creates, sorted by whether it holds flow data at rest. A store must
# name a key (or, Cloud Tasks, get one by the tasks_cmek_command output); a type added to an
# environment fails here until it is sorted, so a new store cannot miss the key.
FLOW_DATA_STORES = {
    "google_firestore_database": "firestore",
    "google_pubsub_topic": "pubsub",
    "google_storage_bucket": "storage",
    "google_cloud_tasks_queue": "tasks",
}
NO_FLOW_DATA = {
    # Configuration, identities and grants.
    "google_project_service",
    "google_project_service_identity",
    "google_project_iam_member",
    "google_cloud_run_v2_service_iam_member",
    "google_pubsub_topic_iam_member",
    "google_pubsub_subscription_iam_member",
    "google_cloud_tasks_queue_iam_member",
    "google_storage_bucket_iam_member",
    "google_kms_key_ring",
    "google_kms_crypto_key",
    "google_kms_crypto_key_iam_member",
    "terraform_data",
    # A subscription keeps its topic's messages under the topic's key.
    "google_pubsub_subscription",
    # The services hold no data at rest; the image is relayflow's code.
    "google_cloud_run_v2_service",
    # The sweeper's and the schedules' jobs: a fixed URL and an empty body.
    "google_cloud_scheduler_job",
    # Index and field settings of the database, not documents.
    "google_firestore_index",
    "google_firestore_field",
    # Metric descriptors, alert policies and the dashboard: figures, never flows.
    "google_monitoring_metric_descriptor",
    "google_monitoring_alert_policy",
    "google_monitoring_dashboard",
}


# --- Every store of flow data is sorted, and each names its own key ----------------------------


def test_every_type_an_environment_creates_is_sorted_by_whether_it_holds_flow_data() -> None:
    created = {
        n.type
        for path in env_dirs()
        for n in Graph(path).nodes.values()
        if n.block.kind == "resource"
    }
    assert created - set(FLOW_DATA_STORES) - NO_FLOW_DATA == set(), "is it a store of flow data?"
    # Each store of flow data is there to be checked (the offload bucket is the env's only one).
    assert set(FLOW_DATA_STORES) <= created


def _argument(body: dict[str, Any], store: str) -> str:
    """The expression a store's resource names its key with (a dynamic block's for_each)."""
    if "kms_key_name" in body:
        return str(body["kms_key_name"])
    dynamic = {name: inner for d in body.get("dynamic", []) for name, inner in d.items()}
    wanted = {"firestore": "cmek_config", "storage": "encryption"}[store]
    return str(dynamic[wanted]["for_each"])


@pytest.mark.parametrize("store", ["firestore", "pubsub", "storage"])
def test_each_store_names_the_key_of_its_own_store(store: str) -> None:
    relayflow = load(RELAYFLOW)
    module = {"firestore": "firestore", "pubsub": "messaging", "storage": "offload"}[store]
    config = load(MODULES / module)
    types = [t for t, s in FLOW_DATA_STORES.items() if s == store]
    resources = [r for r in config.resources if r.type in types]
    assert resources, module
    for resource in resources:
        # Through the module's kms_key_name input, null by default (Google-managed encryption).
        assert "var.kms_key_name" in _argument(resource.body, store), resource.address
    assert config.variables["kms_key_name"].body["default"] is None
    assert relayflow.modules[module].body["kms_key_name"] == f'${{local.kms_key["{store}"]}}'


def test_a_block_that_carries_a_key_is_left_out_when_there_is_none() -> None:
    # cmek_config and encryption with an empty key would be refused; left out, the store keeps
    # Google-managed encryption. A topic's kms_key_name = null is the same as unset.
    for module, name in (("firestore", "cmek_config"), ("offload", "encryption")):
        config = load(MODULES / module)
        dynamic = {
            n: i for r in config.resources for d in r.body.get("dynamic", []) for n, i in d.items()
        }
        assert dynamic[name]["for_each"] == (
            "${var.kms_key_name == null ? [] : [var.kms_key_name]}"
        ), module


def test_each_key_is_granted_to_its_stores_agent_alone_and_handed_out_after_the_grants() -> None:
    relayflow = load(RELAYFLOW)
    (grant,) = relayflow.resources_of("google_kms_crypto_key_iam_member")
    assert grant.body["for_each"] == "${local.key_users}"
    assert grant.body["crypto_key_id"] == "${module.kms.ids[each.key]}"
    assert (grant.body["role"], grant.body["member"]) == (ENCRYPTER, "${each.value}")
    # Store => its own agent, and nobody with CMEK off.
    users = relayflow.locals["key_users"]
    assert users.startswith("${local.cmek ? {") and users.endswith("} : {}}"), users
    members = dict(re.findall(r"(\w+) = ([\w.\[\]]+)", users))
    assert set(members) == set(STORES)
    for store in STORES:
        index = "" if store == "pubsub" else "[0]"  # Pub/Sub's agent exists with CMEK off too
        assert members[store] == f"{AGENTS[store]}{index}.member", store
    identities = {r.name: r.body for r in relayflow.resources_of("google_project_service_identity")}
    for store, service in AGENT_SERVICES.items():
        assert identities[AGENTS[store].rsplit(".", 1)[1]]["service"] == service
    # The wait takes each store's key id from its grant and hands it on (local.kms_key): a
    # store that names its key waits for the grants and the wait.
    wait = relayflow.resource("terraform_data", "key_grants_visible").body
    assert wait["input"] == (
        "${{for store, grant in google_kms_crypto_key_iam_member.agent : "
        "store => grant.crypto_key_id}}"
    )
    assert "grant.id" in wait["triggers_replace"]
    assert relayflow.locals["kms_key"] == (
        '${{for store in ["firestore", "pubsub", "tasks", "storage"] : store => local.cmek ? '
        "terraform_data.key_grants_visible[0].output[store] : null}}"
    )
    assert "sleep ${var.cmek.grant_wait_s}" in str(wait["provisioner"])


def test_the_keys_are_never_destroyed_and_rotate() -> None:
    kms = load(MODULES / "kms")
    key = kms.resource("google_kms_crypto_key", "main").body
    assert only_block(key, "lifecycle")["prevent_destroy"] is True
    assert key["rotation_period"] == "${var.rotation_period}"
    assert key["purpose"] == "ENCRYPT_DECRYPT"
    assert key["key_ring"] == "${google_kms_key_ring.main[each.value.location].id}"
    ring = kms.resource("google_kms_key_ring", "main").body
    assert ring["for_each"] == "${local.locations}"
    assert load(RELAYFLOW).modules["kms"].body["keys"] == "${local.cmek_keys}"


def test_cloud_tasks_gets_its_key_by_the_command_the_environment_outputs() -> None:
    # A queue has no key argument in provider 6.50, and no resource sets a location's CMEK
    # config (projects.locations.updateCmekConfig): gcloud tasks cmek-config update does.
    queue = load_schema()["google"]["resource"]["google_cloud_tasks_queue"]
    assert not [a for a in queue["attributes"] if "kms" in a or "key" in a]
    assert not [t for t in load_schema()["google"]["resource"] if "cmek" in t]
    relayflow = load(RELAYFLOW)
    command = relayflow.outputs["tasks_cmek_command"].body["value"]
    assert command == (
        '${local.cmek ? "gcloud tasks cmek-config update --project=${var.project_id} '
        '--location=${var.region} --kms-key-name=${local.kms_key["tasks"]}" : null}'
    )
    # The queues are in the region whose config it sets.
    assert relayflow.modules["queues"].body["location"] == "${var.region}"
    for path in env_dirs():
        assert load(path).outputs["tasks_cmek_command"].body["value"] == (
            "${module.relayflow.tasks_cmek_command}"
        )


# --- With CMEK off nothing of it exists ---------------------------------------------------------


def test_everything_cmek_adds_exists_only_with_cmek_on() -> None:
    relayflow = load(RELAYFLOW)
    only_with_cmek = [
        relayflow.resource("google_project_service_identity", "firestore"),
        relayflow.resource("google_project_service_identity", "cloudtasks"),
        relayflow.resource("terraform_data", "key_grants_visible"),
        *[d for d in relayflow.data if d.type == "google_storage_project_service_account"],
    ]
    assert len(only_with_cmek) == 4
    for block_ in only_with_cmek:
        assert block_.body["count"] == "${local.cmek ? 1 : 0}", block_.address
    assert relayflow.locals["cmek"] == "${var.cmek.enabled}"
    # The keys and their grants: one per entry of a map that is empty with CMEK off.
    assert relayflow.modules["kms"].body["keys"] == "${local.cmek_keys}"
    assert relayflow.locals["cmek_keys"].endswith(" : {}}")
    (grant,) = relayflow.resources_of("google_kms_crypto_key_iam_member")
    assert grant.body["for_each"] == "${local.key_users}"


def test_cmek_is_off_unless_an_environment_turns_it_on() -> None:
    module = load(RELAYFLOW).variables["cmek"].body
    assert module["default"] == {"enabled": False}
    type_ = re.sub(r"\s+", "", module["type"])
    # The environments spell the module's rotation period out: checkov reads defaults only, and
    # its rotation check (CKV_GCP_43) cannot see through an optional attribute's default.
    rotation = re.search(r'rotation_period=optional\(string,"(\w+)"\)', type_)
    assert rotation
    for path in env_dirs():
        env = load(path)
        assert env.variables["cmek"].body["default"] == {
            "enabled": False,
            "rotation_period": rotation[1],
        }, path.name
        assert env.modules["relayflow"].body["cmek"] == "${var.cmek}"
        # The same fields (the module gives the defaults).
        fields = re.findall(r"(\w+)=(?:optional\()?\w+", type_)
        env_type = re.sub(r"\s+", "", env.variables["cmek"].body["type"])
        assert re.findall(r"(\w+)=(?:optional\()?\w+", env_type) == fields, path.name


# --- What the locals make of the option, run by Terraform ----------------------------------------


def _probe(root: Path) -> None:
    """The relayflow module's CMEK variables and locals, with a terraform_data standing in for
    the key grants (it hands on made-up key ids, as the real one hands on the grants')."""
    variables = (RELAYFLOW / "variables.tf").read_text(encoding="utf-8")
    main = (RELAYFLOW / "main.tf").read_text(encoding="utf-8")
    kms = (MODULES / "kms" / "variables.tf").read_text(encoding="utf-8")
    names = ("cmek", "firestore_kms_location", "cmek_keys", "kms_key", "services")
    parts = [
        block(variables, 'variable "cmek" {'),
        block(variables, 'variable "firestore_location" {'),
        block(variables, 'variable "region" {'),
        # The kms module's own check of the rotation period, as a variable of the probe.
        block(kms, 'variable "rotation_period" {')
        .replace('"rotation_period"', '"rotation"', 1)
        .replace("var.rotation_period", "var.rotation"),
        "locals {\n" + "\n".join(local(main, n) for n in names) + "\n}",
        'resource "terraform_data" "key_grants_visible" {\n'
        "  count = local.cmek ? 1 : 0\n"
        '  input = { for s, k in local.cmek_keys : s => "${k.location}/${s}" }\n}',
        *[f'output "{n}" {{ value = local.{n} }}' for n in names[2:]],
    ]
    root.mkdir()
    (root / "main.tf").write_text("\n\n".join(parts) + "\n", encoding="utf-8")


def _apply(root: Path, cases: dict[str, dict[str, Any]]) -> dict[str, Any]:
    _probe(root / "probe")
    write_calls(root, cases)
    done = run(root, "apply", "-auto-approve")
    assert done.returncode == 0, done.stdout + done.stderr
    return outputs(root)


BASE = {"region": "us-central1", "firestore_location": "nam5"}
CASES = {
    "off": {**BASE, "cmek": {"enabled": False}},
    "nam5": {**BASE, "cmek": {"enabled": True}},
    "eur3": {"region": "europe-west1", "firestore_location": "eur3", "cmek": {"enabled": True}},
    "regional": {
        "region": "europe-west1",
        "firestore_location": "europe-west1",
        "cmek": {"enabled": True, "rotation_period": "86400s"},
    },
}


@needs_terraform
def test_the_option_gives_each_store_a_key_where_its_data_is_and_nothing_when_off(
    tmp_path: Path,
) -> None:
    built = _apply(tmp_path, CASES)
    off = built["off"]
    assert off["cmek_keys"] == {}
    assert off["kms_key"] == dict.fromkeys(STORES)
    assert "cloudkms.googleapis.com" not in off["services"]
    # Firestore's multi-regions take Cloud KMS's (nam5: us, eur3: europe); the rest the region.
    expected = {
        "nam5": {"firestore": "us", "pubsub": "us-central1"},
        "eur3": {"firestore": "europe", "pubsub": "europe-west1"},
        "regional": {"firestore": "europe-west1", "pubsub": "europe-west1"},
    }
    for case, where in expected.items():
        keys = built[case]["cmek_keys"]
        assert set(keys) == set(STORES), case
        assert keys["firestore"]["location"] == where["firestore"], case
        for store in ("pubsub", "tasks", "storage"):
            assert keys[store]["location"] == where["pubsub"], (case, store)
        # Every store gets the id its grant hands on, none another store's.
        assert built[case]["kms_key"] == {s: f"{keys[s]['location']}/{s}" for s in STORES}, case
        assert "cloudkms.googleapis.com" in built[case]["services"], case
    # Besides the KMS API, the option changes no API.
    assert set(built["nam5"]["services"]) - set(off["services"]) == {"cloudkms.googleapis.com"}


@needs_terraform
def test_a_rotation_period_or_a_wait_out_of_range_is_refused(tmp_path: Path) -> None:
    cases = {
        "under_a_day": {**BASE, "cmek": {"enabled": True}, "rotation": "3600s"},
        "over_90_days": {**BASE, "cmek": {"enabled": True}, "rotation": "7776001s"},
        "in_days": {**BASE, "cmek": {"enabled": True}, "rotation": "90d"},
        "long_wait": {**BASE, "cmek": {"enabled": True, "grant_wait_s": 1000}},
    }
    _probe(tmp_path / "probe")
    write_calls(tmp_path, cases)
    done = run(tmp_path, "plan")
    output = done.stdout + done.stderr
    refused = set(re.findall(r'module\.(\w+)\.var\.\w+|in module "(\w+)"', output))
    assert {a or b for a, b in refused} == set(cases), output[-3000:]


# --- Documentation ------------------------------------------------------------------------------


def test_the_readme_says_how_to_turn_it_on_and_what_it_cannot_change() -> None:
    readme = (TERRAFORM / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Customer-managed encryption keys\n", 1)[1].split("\n## ", 1)[0]
    for needle in (
        "cmek = { enabled = true }",
        "tasks_cmek_command",
        "gcloud tasks cmek-config update",
        "when the database is created",
        "rotation_period",
        "prevent_destroy",
    ):
        assert needle in section, needle

"""Structural checks of infra/terraform: layout, references, topology, ingress, identities, IAM.

``terraform validate`` cannot run here (no provider download), so these tests read the HCL and
assert what matters: what `validate` would catch in module wiring, and the security and
topology invariants it would not.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import hcl2
import pytest
from provider_schema import provider_of
from tfconfig import (
    MODULES,
    TERRAFORM,
    TOPOLOGY_FILE,
    Block,
    Config,
    all_dirs,
    blocks,
    env_dirs,
    load,
    module_dirs,
    object_type_attributes,
    only_block,
    references,
    strings,
    topology,
)

from relayflow.core.records import FlowRecord
from relayflow.settings import Settings

MODULE_FILES = {"main.tf", "variables.tf", "outputs.tf", "versions.tf"}
EXPECTED_MODULES = {
    "analytics",
    "bootstrap",
    "firestore",
    "kms",
    "messaging",
    "monitoring",
    "offload",
    "queues",
    "relayflow",
    "service",
}
ENVIRONMENTS = {"dev", "staging", "prod"}
PUBLIC = {"allUsers", "allAuthenticatedUsers"}
COMPONENTS = {"start_flow": "start-flow", "worker": "worker", "poller": "poller", "api": "api"}
# Arguments of a module block that are meta-arguments, not input variables.
META_ARGUMENTS = {"source", "version", "providers", "depends_on", "count", "for_each"} | {
    "__is_block__"
}

RELAYFLOW = MODULES / "relayflow"


def ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(TERRAFORM)) for p in paths]


# --- Layout -------------------------------------------------------------------------------------


def test_the_expected_modules_and_environments_exist() -> None:
    assert {p.name for p in module_dirs()} == EXPECTED_MODULES
    assert {p.name for p in env_dirs()} == ENVIRONMENTS


@pytest.mark.parametrize("path", module_dirs(), ids=ids(module_dirs()))
def test_a_module_has_the_four_standard_files(path: Path) -> None:
    assert {f.name for f in path.glob("*.tf")} == MODULE_FILES


@pytest.mark.parametrize("path", module_dirs(), ids=ids(module_dirs()))
def test_a_module_names_its_primary_resource_main_and_configures_no_provider(path: Path) -> None:
    config = load(path)
    assert "main" in {b.name for b in config.resources + config.data}
    assert config.providers == [], "modules inherit providers from the root"


@pytest.mark.parametrize("path", all_dirs(), ids=ids(all_dirs()))
def test_terraform_and_google_provider_versions_are_pinned(path: Path) -> None:
    config = load(path)
    settings = [t for t in config.terraform if "required_providers" in t]
    assert len(settings) == 1, "one terraform { required_providers } block, in versions.tf"
    assert settings[0]["required_version"] == ">= 1.5"
    (providers,) = settings[0]["required_providers"]
    assert providers["google"] == {"source": "hashicorp/google", "version": "~> 6.0"}
    # google-beta only where something needs it, at the same version as google.
    uses_beta = any(provider_of(b.body, b.type) == "google-beta" for b in config.resources)
    calls_beta_module = any(
        "google-beta" in _required_providers((path / m.body["source"]).resolve())
        for m in config.modules.values()
    )
    if uses_beta or calls_beta_module:
        assert providers["google-beta"] == {"source": "hashicorp/google-beta", "version": "~> 6.0"}
    else:
        assert "google-beta" not in providers
    assert (path / "versions.tf").exists()


def _required_providers(path: Path) -> dict[str, Any]:
    (settings,) = [t for t in load(path).terraform if "required_providers" in t]
    (providers,) = settings["required_providers"]
    return dict(providers)


@pytest.mark.parametrize("path", all_dirs(), ids=ids(all_dirs()))
def test_every_variable_is_typed_and_described(path: Path) -> None:
    config = load(path)
    assert config.variables, "a module or root without inputs is suspicious"
    for name, variable in config.variables.items():
        assert variable.body.get("type"), f"variable {name} has no type"
        assert str(variable.body.get("description", "")).strip(), f"variable {name} undescribed"


@pytest.mark.parametrize("path", all_dirs(), ids=ids(all_dirs()))
def test_every_output_is_described(path: Path) -> None:
    for name, output in load(path).outputs.items():
        assert str(output.body.get("description", "")).strip(), f"output {name} undescribed"


# --- References (what `terraform validate` would check) -----------------------------------------


def _expressions(config: Config) -> list[str]:
    return [s for doc in config.files.values() for s in strings(doc)]


@pytest.mark.parametrize("path", all_dirs(), ids=ids(all_dirs()))
def test_var_and_local_references_are_declared(path: Path) -> None:
    config = load(path)
    used_vars = set().union(*(references(e, "var") for e in _expressions(config)))
    used_locals = set().union(*(references(e, "local") for e in _expressions(config)))
    assert used_vars <= set(config.variables), used_vars - set(config.variables)
    assert used_locals <= set(config.locals), used_locals - set(config.locals)


def _module_calls() -> list[tuple[Config, Block]]:
    return [(load(p), call) for p in all_dirs() for call in load(p).modules.values()]


@pytest.mark.parametrize(
    ("caller", "call"), _module_calls(), ids=[f"{c.path.name}:{m.name}" for c, m in _module_calls()]
)
def test_a_module_call_passes_declared_inputs_and_all_required_ones(
    caller: Config, call: Block
) -> None:
    target = load((caller.path / call.body["source"]).resolve())
    passed = set(call.body) - META_ARGUMENTS
    required = {n for n, v in target.variables.items() if "default" not in v.body}
    assert passed <= set(target.variables), f"undeclared inputs: {passed - set(target.variables)}"
    assert required <= passed, f"missing required inputs: {required - passed}"


@pytest.mark.parametrize("path", all_dirs(), ids=ids(all_dirs()))
def test_module_output_references_exist(path: Path) -> None:
    config = load(path)
    for expr in _expressions(config):
        for call, output in re.findall(r"module\.(\w+)\.(\w+)", expr):
            target = load((path / config.modules[call].body["source"]).resolve())
            assert output in target.outputs, f"module.{call}.{output} is not an output"


# --- Environments -------------------------------------------------------------------------------


def _backend(path: Path) -> dict[str, Any]:
    backends = [b for t in load(path).terraform for b in blocks(t, "backend")]
    assert len(backends) == 1, f"{path.name}: exactly one backend"
    return dict(backends[0]["gcs"])


@pytest.mark.parametrize("path", env_dirs(), ids=ids(env_dirs()))
def test_an_env_root_is_thin_one_relayflow_module_call(path: Path) -> None:
    config = load(path)
    assert config.resources == [] and config.data == []
    (call,) = config.modules.values()
    assert (path / call.body["source"]).resolve() == RELAYFLOW.resolve()
    assert sorted(p.name for p in config.providers) == ["google", "google-beta"]


def test_each_env_has_a_gcs_backend_with_its_own_prefix_and_no_committed_bucket() -> None:
    backends = {p.name: _backend(p) for p in env_dirs()}
    prefixes = [b["prefix"] for b in backends.values()]
    assert len(set(prefixes)) == len(prefixes)
    for env, backend in backends.items():
        assert backend["prefix"] == f"relayflow/{env}"
        # Bucket names are global and each environment has its own (bootstrap): given at init.
        assert "bucket" not in backend


@pytest.mark.parametrize("path", env_dirs(), ids=ids(env_dirs()))
def test_the_committed_tfvars_example_sets_declared_and_required_variables(path: Path) -> None:
    example = path / "terraform.tfvars.example"
    with example.open(encoding="utf-8") as handle:
        values = set(hcl2.load(handle)) - {"__comments__", "__inline_comments__"}
    variables = load(path).variables
    required = {n for n, v in variables.items() if "default" not in v.body}
    assert values <= set(variables)
    assert required <= values


@pytest.mark.parametrize("path", env_dirs(), ids=ids(env_dirs()))
def test_state_and_local_values_are_not_committed(path: Path) -> None:
    ignored = (TERRAFORM / ".gitignore").read_text(encoding="utf-8").split()
    assert "terraform.tfvars" in ignored
    assert not list(path.glob("*.tfstate*"))


# --- Topology: one definition (DESIGN invariant 10) ---------------------------------------------


def _topology_names() -> set[str]:
    topo = topology()
    names = set(topo["topics"].values())
    names |= {s["name"] for s in topo["subscriptions"].values()}
    names |= {q["name"] for q in topo["queues"].values()}
    analytics = topo["analytics"]
    names |= {analytics["dataset"], analytics["table"], analytics["dead_letter"]["topic"]}
    names |= {analytics[k]["name"] for k in ("subscription", "dead_letter")}
    return names


def test_the_relayflow_module_reads_the_repository_topology_file() -> None:
    expr = load(RELAYFLOW).locals["topology"]
    match = re.fullmatch(r'\$\{jsondecode\(file\("\$\{path\.module\}/([^"]+)"\)\)\}', expr)
    assert match, expr
    assert (RELAYFLOW / match.group(1)).resolve() == TOPOLOGY_FILE


@pytest.mark.parametrize("path", all_dirs(), ids=ids(all_dirs()))
def test_no_topology_name_is_spelled_in_terraform(path: Path) -> None:
    topo = topology()
    collections = set(topo["firestore"].values())
    for expr in _expressions(load(path)):
        for name in _topology_names():
            assert not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", expr), (name, expr)
        assert not any(f'"{c}"' in expr for c in collections), expr
    # A value spelling a collection; a key may share its word (the tenants variable and the
    # tenants section of RELAYFLOW_TENANTS are not the tenants collection).
    for value in _values(load(path)):
        assert value not in collections, value


def _values(config: Config) -> list[str]:
    """Every string of a directory that is a value, not an attribute name or block label."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, dict):
            for inner in value.values():
                walk(inner)
        elif isinstance(value, list):
            for inner in value:
                walk(inner)

    for doc in config.files.values():
        walk(doc)
    return found


def test_queues_subscriptions_and_topics_come_from_the_topology() -> None:
    relayflow = load(RELAYFLOW)
    inputs = relayflow.modules
    # Every shard of each topology queue (tests/infra/test_queue_shards.py expands it).
    assert inputs["queues"].body["queues"] == "${local.queues}"
    assert "for role, q in local.topology.queues" in relayflow.locals["queues"]
    assert inputs["messaging"].body["topics"] == "${local.topology.topics}"
    assert inputs["messaging"].body["start_subscription"] == (
        "${local.topology.subscriptions.start}"
    )
    assert inputs["messaging"].body["signals_subscription"] == (
        "${local.topology.subscriptions.signals}"
    )
    holds = inputs["messaging"].body["hold_subscriptions"]
    assert set(holds.values()) == {
        f"${{local.topology.subscriptions.{k}}}"
        for k in topology()["subscriptions"]
        if k not in PUSH_SUBSCRIPTIONS
    }


# Topology subscriptions Pub/Sub pushes to a service; the others hold messages (pull).
PUSH_SUBSCRIPTIONS = {"start", "signals"}


def test_every_push_subscription_of_the_topology_has_its_own_resource() -> None:
    messaging = load(MODULES / "messaging")
    pushed = {
        r.name
        for r in messaging.resources_of("google_pubsub_subscription")
        if r.name not in ("hold", "tenant")  # each named tenant's: tests/infra/test_tenants.py
    }
    assert pushed == PUSH_SUBSCRIPTIONS
    for name in PUSH_SUBSCRIPTIONS:
        settings = topology()["subscriptions"][name]
        assert "max_delivery_attempts" in settings and "dead_letter_topic" in settings, name


@pytest.mark.parametrize(
    ("module", "variable", "section"),
    [
        ("queues", "queues", ["queues", "steps"]),
        ("queues", "queues", ["queues", "polls"]),
        ("messaging", "topics", ["topics"]),
        ("messaging", "start_subscription", ["subscriptions", "start"]),
        ("messaging", "signals_subscription", ["subscriptions", "signals"]),
        ("messaging", "hold_subscriptions", ["subscriptions", "dead_letter"]),
        ("messaging", "hold_subscriptions", ["subscriptions", "results"]),
    ],
)
def test_topology_sections_convert_to_the_module_variable_types(
    module: str, variable: str, section: list[str]
) -> None:
    value: Any = topology()
    for key in section:
        value = value[key]
    wanted = object_type_attributes(load(MODULES / module).variables[variable].body["type"])
    wanted -= {"shard"}  # the queue's shard number: the caller adds it to each shard's queue
    assert wanted <= set(value), f"topology {'.'.join(section)} lacks {wanted - set(value)}"


def test_queue_rate_and_retry_settings_are_mapped_from_each_queue() -> None:
    queues = load(MODULES / "queues")
    # Shard 0 of each kind (main) and shards >= 1 (shard): between them every queue.
    assert queues.locals["first"] == "${{for key, q in var.queues : key => q if q.shard == 0}}"
    assert queues.locals["more"] == "${{for key, q in var.queues : key => q if q.shard > 0}}"
    for name, each in (("main", "${local.first}"), ("shard", "${local.more}")):
        queue = queues.resource("google_cloud_tasks_queue", name).body
        assert queue["for_each"] == each
        assert queue["name"] == "${each.value.name}"
        rates = only_block(queue, "rate_limits")
        retry = only_block(queue, "retry_config")
        assert rates["max_dispatches_per_second"] == "${each.value.max_dispatches_per_second}"
        assert rates["max_concurrent_dispatches"] == "${each.value.max_concurrent_dispatches}"
        assert retry["max_attempts"] == "${each.value.max_attempts}"
        assert retry["max_retry_duration"] == "${each.value.max_retry_duration_s}s"
        assert retry["min_backoff"] == "${each.value.min_backoff_s}s"
        assert retry["max_backoff"] == "${each.value.max_backoff_s}s"
        assert retry["max_doublings"] == "${each.value.max_doublings}"


def test_the_dead_letter_policy_gives_up_after_the_topology_attempts() -> None:
    assert topology()["subscriptions"]["start"]["max_delivery_attempts"] == 5
    sub = load(MODULES / "messaging").resource("google_pubsub_subscription", "start").body
    policy = only_block(sub, "dead_letter_policy")
    assert policy["max_delivery_attempts"] == "${var.start_subscription.max_delivery_attempts}"
    assert "var.start_subscription.dead_letter_topic" in policy["dead_letter_topic"]
    assert sub["ack_deadline_seconds"] == "${var.start_subscription.ack_deadline_s}"


def test_the_pubsub_service_agent_may_move_dead_letters_and_nothing_more() -> None:
    messaging = load(MODULES / "messaging")
    call = load(RELAYFLOW).modules["messaging"].body
    # Named by the resource that makes the agent exist, never spelled as a string.
    assert call["pubsub_service_agent"] == "${google_project_service_identity.pubsub.member}"
    identity = load(RELAYFLOW).resource("google_project_service_identity", "pubsub").body
    assert identity["service"] == "pubsub.googleapis.com"
    assert identity["provider"] == "google-beta"
    publisher = messaging.resource("google_pubsub_topic_iam_member", "dead_letter_publisher").body
    subscriber = messaging.resource(
        "google_pubsub_subscription_iam_member", "dead_letter_subscriber"
    ).body
    assert publisher["role"] == "roles/pubsub.publisher"
    assert "var.start_subscription.dead_letter_topic" in publisher["topic"]
    assert subscriber["role"] == "roles/pubsub.subscriber"
    assert subscriber["subscription"] == "${google_pubsub_subscription.start.name}"
    assert publisher["member"] == subscriber["member"] == "${var.pubsub_service_agent}"
    # The signals subscription dead-letters to the same topic: one more subscriber grant.
    signals = messaging.resource(
        "google_pubsub_subscription_iam_member", "signals_dead_letter_subscriber"
    ).body
    assert signals["role"] == "roles/pubsub.subscriber"
    assert signals["subscription"] == "${google_pubsub_subscription.signals.name}"
    assert signals["member"] == "${var.pubsub_service_agent}"
    # And each named tenant's start subscription (tests/infra/test_tenants.py).
    tenants = messaging.resource(
        "google_pubsub_subscription_iam_member", "tenant_dead_letter_subscriber"
    ).body
    assert tenants["for_each"] == "${google_pubsub_subscription.tenant}"
    assert tenants["subscription"] == "${each.value.name}"
    assert tenants["role"] == "roles/pubsub.subscriber"
    assert tenants["member"] == "${var.pubsub_service_agent}"
    agent_grants = [
        r
        for r in messaging.resources
        if r.type.endswith("_iam_member") and "pubsub_service_agent" in r.body["member"]
    ]
    assert len(agent_grants) == 4


def test_the_signals_subscription_shares_the_start_dead_letter_topic() -> None:
    topo = topology()["subscriptions"]
    assert topo["signals"]["dead_letter_topic"] == topo["start"]["dead_letter_topic"]
    assert topo["start"]["dead_letter_topic"] == topology()["topics"]["dead_letter"]
    sub = load(MODULES / "messaging").resource("google_pubsub_subscription", "signals").body
    (lifecycle,) = sub["lifecycle"]
    (precondition,) = lifecycle["precondition"]
    assert precondition["condition"] == (
        "${var.signals_subscription.dead_letter_topic == var.start_subscription.dead_letter_topic}"
    )


def test_the_start_subscription_pushes_to_start_flow_with_an_oidc_token() -> None:
    messaging = load(MODULES / "messaging")
    sub = messaging.resource("google_pubsub_subscription", "start").body
    push = only_block(sub, "push_config")
    token = only_block(push, "oidc_token")
    assert token["service_account_email"] == "${var.push_service_account_email}"
    # The path names the topic (functions-framework's CloudEvent source: the default tenant).
    assert push["push_endpoint"] == "${local.push_path}/${var.start_subscription.topic}"
    assert messaging.locals["push_path"] == "${var.push_url}/projects/${var.project_id}/topics"
    call = load(RELAYFLOW).modules["messaging"].body
    assert call["push_url"] == "${module.start_flow.uri}"
    assert call["push_audience"] == "${module.start_flow.uri}"
    assert call["push_service_account_email"] == "${data.google_service_account.pubsub_push.email}"


def test_the_signals_topic_and_subscription_come_from_the_topology() -> None:
    topo = topology()
    assert topo["subscriptions"]["signals"]["topic"] == topo["topics"]["signals"]
    assert set(object_type_attributes(_messaging_type("topics"))) == set(topo["topics"])
    sub = load(MODULES / "messaging").resource("google_pubsub_subscription", "signals").body
    assert sub["name"] == "${var.signals_subscription.name}"
    assert sub["topic"] == "${local.topic_ids[var.signals_subscription.topic]}"
    assert sub["ack_deadline_seconds"] == "${var.signals_subscription.ack_deadline_s}"
    retry = only_block(sub, "retry_policy")
    assert retry["minimum_backoff"] == "${var.signals_subscription.min_backoff_s}s"
    assert retry["maximum_backoff"] == "${var.signals_subscription.max_backoff_s}s"
    policy = only_block(sub, "dead_letter_policy")
    assert policy["max_delivery_attempts"] == "${var.signals_subscription.max_delivery_attempts}"
    assert policy["dead_letter_topic"] == (
        "${local.topic_ids[var.signals_subscription.dead_letter_topic]}"
    )
    settings = topo["subscriptions"]["signals"]
    assert {k: settings[k] for k in ("ack_deadline_s", "max_delivery_attempts")} == {
        "ack_deadline_s": 20,
        "max_delivery_attempts": 10,
    }
    assert (settings["min_backoff_s"], settings["max_backoff_s"]) == (1, 60)


def _messaging_type(variable: str) -> str:
    return str(load(MODULES / "messaging").variables[variable].body["type"])


def test_the_signals_subscription_pushes_to_the_api_signals_route_with_the_push_token() -> None:
    messaging = load(MODULES / "messaging")
    sub = messaging.resource("google_pubsub_subscription", "signals").body
    push = only_block(sub, "push_config")
    assert push["push_endpoint"] == "${var.signals_push_endpoint}"
    token = only_block(push, "oidc_token")
    assert token["service_account_email"] == "${var.push_service_account_email}"
    assert token["audience"] == "${var.signals_push_audience}"
    assert "startswith(var.signals_push_endpoint" in str(
        messaging.variables["signals_push_endpoint"].body["validation"]
    )
    call = load(RELAYFLOW).modules["messaging"].body
    assert call["signals_push_endpoint"] == "${module.api.uri}/signals"
    # The audience the api verifies (RELAYFLOW_API_URL), and one Cloud Run admits.
    assert call["signals_push_audience"] == '${local.url["api"]}'
    assert load(RELAYFLOW).locals["common_env"]["RELAYFLOW_API_URL"] == '${local.url["api"]}'
    assert load(RELAYFLOW).modules["api"].body["custom_audiences"] == ['${local.url["api"]}']
    # The same push account as the start subscription, which therefore invokes the api too.
    assert call["push_service_account_email"] == "${data.google_service_account.pubsub_push.email}"
    api = load(RELAYFLOW).modules["api"].body
    assert "pubsub_push = local.pubsub_push_member" in api["invoker_members"]
    assert "pubsub_push_member" not in api["viewer_members"]
    assert load(RELAYFLOW).locals["pubsub_push_member"] == (
        "serviceAccount:${data.google_service_account.pubsub_push.email}"
    )


def test_the_signals_subscription_waits_for_the_api_like_start_waits_for_start_flow() -> None:
    messaging = load(MODULES / "messaging")
    for sub, after in (("start", "push_after"), ("signals", "signals_push_after")):
        body = messaging.resource("google_pubsub_subscription", sub).body
        assert body["depends_on"][0] == f"${{var.{after}}}"
    # The api's own grants here (dead letters) are among what its identity holds before a push.
    signals = messaging.resource("google_pubsub_subscription", "signals").body
    assert signals["depends_on"][1:] == [
        "${google_pubsub_subscription_iam_member.api_dead_letter_reader}",
        "${google_pubsub_topic_iam_member.api_dead_letter_replayer}",
    ]
    relayflow = load(RELAYFLOW)
    call = relayflow.modules["messaging"].body
    assert call["push_after"] == (
        "${concat(module.start_flow.access_grant_ids, local.push_prerequisites)}"
    )
    assert call["signals_push_after"] == (
        "${concat(module.api.access_grant_ids, local.push_prerequisites)}"
    )
    prerequisites = relayflow.locals["push_prerequisites"]
    for needed in (
        "module.firestore.resource_ids",
        "values(module.queues.ids)",
        "local.runtime_grant_ids",
    ):
        assert needed in prerequisites


def test_signal_publishers_may_publish_on_the_signals_topic_only() -> None:
    messaging = load(MODULES / "messaging")
    grant = messaging.resource("google_pubsub_topic_iam_member", "signal_publisher").body
    assert grant["for_each"] == "${var.signal_publishers}"
    assert grant["topic"] == '${google_pubsub_topic.main["signals"].name}'
    assert grant["role"] == "roles/pubsub.publisher"
    assert grant["member"] == "${each.value}"
    for config in (messaging, load(RELAYFLOW)):
        variable = config.variables["signal_publishers"].body
        assert variable["type"] == "${map(string)}" and variable["default"] == {}
        (validation,) = variable["validation"]
        assert "allAuthenticatedUsers" in validation["condition"]
    call = load(RELAYFLOW).modules["messaging"].body
    assert call["signal_publishers"] == "${var.signal_publishers}"
    for path in env_dirs():
        assert load(path).variables["signal_publishers"].body["default"] == {}


def test_subscriptions_never_expire() -> None:
    messaging = load(MODULES / "messaging")
    for sub in messaging.resources_of("google_pubsub_subscription"):
        assert only_block(sub.body, "expiration_policy")["ttl"] == "", sub.address


# --- Firestore ----------------------------------------------------------------------------------


# Which topology collections expire, by key. History goes retention_days after it ends (flows,
# their ForEach lanes, refused messages, bulk actions and their rows). Live state never
# expires: tenant slots and operator states, breakers and their call windows are read on every
# start or call and overwritten in place; deleting one would free a slot a running flow holds,
# resume a paused tenant or close an open breaker behind the engine's back. A new collection
# must be put in one of the two.
EXPIRING = {
    "flows_collection",
    "lanes_collection",
    "rejected_collection",
    "bulk_actions_collection",
    "bulk_rows_collection",
}
LIVE_STATE = {
    "tenant_slots_collection",
    "tenants_collection",
    "breakers_collection",
    "breaker_windows_collection",
}


def test_firestore_is_native_with_ttl_on_expire_at_for_flows_lanes_and_rejected() -> None:
    firestore = load(MODULES / "firestore")
    assert firestore.resource("google_firestore_database", "main").body["type"] == (
        "FIRESTORE_NATIVE"
    )
    ttl = firestore.resource("google_firestore_field", "ttl").body
    assert ttl["field"] == "${var.ttl_field}"
    assert firestore.variables["ttl_field"].body["default"] == "expire_at"
    assert blocks(ttl, "ttl_config")
    call = load(RELAYFLOW).modules["firestore"].body
    assert call["ttl_collections"] == [
        "${local.topology.firestore.flows_collection}",
        "${local.topology.firestore.lanes_collection}",
        "${local.topology.firestore.rejected_collection}",
        "${local.topology.firestore.bulk_actions_collection}",
        "${local.topology.firestore.bulk_rows_collection}",
    ]
    assert {f"${{local.topology.firestore.{k}}}" for k in EXPIRING} == set(call["ttl_collections"])


def test_live_state_collections_never_expire_and_every_collection_is_classified() -> None:
    collections = {k for k in topology()["firestore"] if k.endswith("_collection")}
    assert collections == EXPIRING | LIVE_STATE, "classify the new collection"
    assert not EXPIRING & LIVE_STATE
    expiring = load(RELAYFLOW).modules["firestore"].body["ttl_collections"]
    for key in LIVE_STATE:
        assert f"${{local.topology.firestore.{key}}}" not in expiring, key


def test_flows_have_the_composite_indexes_of_the_store_queries() -> None:
    indexes = load(RELAYFLOW).modules["firestore"].body["composite_indexes"]
    fields = {
        tuple(f["field_path"] for f in index["fields"])
        for index in indexes.values()
        if index["collection"] == "${local.topology.firestore.flows_collection}"
    }
    assert ("shard", "status", "updated_at", "flow_id") in fields
    assert ("shard", "status", "next_run_at") in fields
    assert ("shard", "result_published", "finished_at") in fields


def _flows_indexes() -> set[tuple[tuple[str, str], ...]]:
    indexes = load(RELAYFLOW).modules["firestore"].body["composite_indexes"]
    return {
        tuple((f["field_path"], f.get("order") or f["array_config"]) for f in index["fields"])
        for index in indexes.values()
        if index["collection"] == "${local.topology.firestore.flows_collection}"
    }


# How GET /flows pages (relayflow.gcp.store.listing's _listing): newest update first, ties by
# id (test_list_indexes checks every list and count the store makes against the indexes).
LIST_ORDER = (("updated_at", "DESCENDING"), ("flow_id", "DESCENDING"))
# The first field of every index over a time that moves forward (relayflow.gcp.store.keys).
SHARD = ("shard", "ASCENDING")
# Times that move forward with the flows, in the collections written at the flow rate: never
# indexed alone, only behind SHARD.
MONOTONIC = {
    "updated_at",
    "next_run_at",
    "finished_at",
    "queued_at",
    "created_at",
    "deadline_at",
    "aside_until",
    "rejected_at",
    "taken_at",
    "free_at",
}


def _store_module(name: str) -> str:
    """The source of one of the Firestore store's modules (``relayflow/gcp/store/{name}.py``)."""
    path = TERRAFORM.parents[1] / "relayflow" / "gcp" / "store" / f"{name}.py"
    return path.read_text(encoding="utf-8")


def test_a_tenant_list_in_one_status_has_its_own_index() -> None:
    tenant_status = (SHARD, ("tenant", "ASCENDING"), ("status", "ASCENDING"), *LIST_ORDER)
    assert tenant_status in _flows_indexes()


def test_waiting_starts_are_found_oldest_first_of_every_tenant_and_of_one() -> None:
    store = _store_module("tenant_slots")
    waiting = store[store.index("def waiting(") :]
    waiting = waiting[: waiting.index("\n    def ")]
    assert 'FieldFilter("admission", "==", "waiting")' in waiting
    assert 'FieldFilter("tenant", "==", tenant)' in waiting
    assert '.order_by("queued_at")' in waiting
    flows = _flows_indexes()
    assert (SHARD, ("admission", "ASCENDING"), ("queued_at", "ASCENDING")) in flows
    assert (
        SHARD,
        ("admission", "ASCENDING"),
        ("tenant", "ASCENDING"),
        ("queued_at", "ASCENDING"),
    ) in flows


def test_live_state_is_found_by_one_field_and_needs_no_composite_index() -> None:
    # tenant_slots by tenant == T, breaker_windows by dependency == D: automatic indexes.
    indexes = load(RELAYFLOW).modules["firestore"].body["composite_indexes"]
    collections = {index["collection"] for index in indexes.values()}
    for key in LIVE_STATE:
        assert f"${{local.topology.firestore.{key}}}" not in collections, key
    store = _store_module("tenant_slots")
    assert 'self._slots.where(filter=firestore.FieldFilter("tenant", "==", tenant))' in store


# relayflow.gcp.store.recovery's overdue and unpublished: (equality field, range and order
# field), both ascending, asked of flows and of ForEach lanes alike.
SWEEPER_QUERIES = {("status", "next_run_at"), ("result_published", "finished_at")}


def test_lanes_have_the_composite_indexes_of_the_sweeper_queries() -> None:
    indexes = load(RELAYFLOW).modules["firestore"].body["composite_indexes"]
    lanes = [
        index["fields"]
        for index in indexes.values()
        if index["collection"] == "${local.topology.firestore.lanes_collection}"
    ]
    sharded = {("shard", *query) for query in SWEEPER_QUERIES}
    assert {tuple(f["field_path"] for f in fields) for fields in lanes} == sharded
    assert len(lanes) == len(SWEEPER_QUERIES)
    assert all(f["order"] == "ASCENDING" for fields in lanes for f in fields)
    flows = _flows_indexes()
    assert {tuple((f["field_path"], f["order"]) for f in fields) for fields in lanes} <= flows


def test_the_store_queries_lanes_as_it_queries_flows() -> None:
    # What the indexes above stand for: the sweeper's two queries run over both collections.
    store = _store_module("recovery")
    assert store.count("(self._flows, self._lanes)") == 2
    for equality, order in SWEEPER_QUERIES:
        assert re.search(rf'FieldFilter\("{equality}", "(==|in)"', store), equality
        assert f'FieldFilter("{order}", "<"' in store and f'.order_by("{order}")' in store


# --- Cloud Run ----------------------------------------------------------------------------------


def _all_resources() -> list[Block]:
    return [r for p in all_dirs() for r in load(p).resources]


def test_only_cloud_run_v2_services_and_only_in_the_service_module() -> None:
    types = {r.type: r.file.parent.name for r in _all_resources()}
    assert types.get("google_cloud_run_v2_service") == "service"
    assert not {"google_cloud_run_service", "google_cloudfunctions2_function"} & set(types)


def test_the_service_is_internal_only_by_default_and_runs_as_its_own_service_account() -> None:
    service = load(MODULES / "service")
    run = service.resource("google_cloud_run_v2_service", "main").body
    assert run["ingress"] == "${var.ingress}"
    assert service.variables["ingress"].body["default"] == "INGRESS_TRAFFIC_INTERNAL_ONLY"
    assert "invoker_iam_disabled" not in run
    template = only_block(run, "template")
    assert template["service_account"] == "${data.google_service_account.main.email}"
    # The bootstrap creates the account, so that the build acts as it alone (test_bootstrap.py).
    (account,) = service.data
    assert (account.type, account.name) == ("google_service_account", "main")
    assert account.body["account_id"] == "${var.service_account_id}"
    assert service.resources_of("google_service_account") == []


def test_each_component_is_a_service_module_call_with_a_distinct_service_account() -> None:
    relayflow = load(RELAYFLOW)
    calls = {n: c.body for n, c in relayflow.modules.items() if c.body["source"] == "../service"}
    assert set(calls) == set(COMPONENTS)
    assert {c["name"] for c in calls.values()} == set(COMPONENTS.values())
    account_ids = [c["service_account_id"] for c in calls.values()]
    read = [sa.body["account_id"] for sa in relayflow.data if sa.type == "google_service_account"]
    # The build account is read too (the api admits it to check each deploy's versions); it
    # is not one of relayflow's runtime identities.
    assert "relayflow-build" in read
    account_ids += [a for a in read if a != "relayflow-build"]
    assert len(account_ids) == len(set(account_ids)) == 7
    assert all(re.fullmatch(r"[a-z][a-z0-9-]{4,28}[a-z0-9]", a) for a in account_ids)
    # Each one the bootstrap creates, and only those: the environment creates no account.
    boot = load(MODULES / "bootstrap")
    assert sorted(i["account_id"] for i in boot.locals["identities"].values()) == sorted(
        account_ids
    )
    assert boot.resource("google_service_account", "build").body["account_id"] == "relayflow-build"
    for path in [RELAYFLOW, MODULES / "service", MODULES / "messaging"]:
        assert load(path).resources_of("google_service_account") == [], path.name


def _expand(text: str, config: Config) -> str:
    """``text`` followed by the text of every local it references, recursively."""
    expanded = text
    for name in sorted(references(text, "local")):
        expanded += _expand(str(config.locals[name]), config)
    return expanded


def _env_of(call: dict[str, Any], relayflow: Config) -> set[str]:
    """RELAYFLOW_* names a service receives (its env expression and the locals it merges)."""
    return set(re.findall(r"RELAYFLOW_[A-Z_]+", _expand(call["env"], relayflow)))


def _settings_env_names() -> set[str]:
    names: set[str] = set()
    for name, info in Settings.model_fields.items():
        alias = info.validation_alias
        choices = getattr(alias, "choices", [alias] if isinstance(alias, str) else [])
        names |= {c for c in choices if isinstance(c, str)} or {f"RELAYFLOW_{name.upper()}"}
    return names


@pytest.mark.parametrize("component", sorted(COMPONENTS))
def test_service_env_names_are_settings_fields(component: str) -> None:
    relayflow = load(RELAYFLOW)
    env = _env_of(relayflow.modules[component].body, relayflow)
    known = _settings_env_names()
    assert env <= known, env - known
    assert {
        "RELAYFLOW_PROJECT_ID",
        "RELAYFLOW_LOCATION",
        "RELAYFLOW_WORKER_URL",
        "RELAYFLOW_POLLER_URL",
        "RELAYFLOW_TASKS_SERVICE_ACCOUNT",
        "RELAYFLOW_VERIFY_TOKENS",
        "RELAYFLOW_APP",
    } <= env
    assert relayflow.locals["common_env"]["RELAYFLOW_VERIFY_TOKENS"] == "true"


def test_the_task_handlers_get_the_client_api_and_the_worker_admits_the_scheduler() -> None:
    relayflow = load(RELAYFLOW)
    for component in ("worker", "poller"):
        assert "RELAYFLOW_CLIENT_API_URL" in _env_of(relayflow.modules[component].body, relayflow)
    worker_env = relayflow.modules["worker"].body["env"]
    scheduler = "jsonencode([data.google_service_account.scheduler.email])"
    assert f"RELAYFLOW_SCHEDULER_SERVICE_ACCOUNTS = {scheduler}" in worker_env


def test_service_urls_are_the_deterministic_cloud_run_urls() -> None:
    url = load(RELAYFLOW).locals["url"]
    assert "https://${name}-${local.project_number}.${var.region}.run.app" in url
    assert load(RELAYFLOW).checks, "a check block verifies the deterministic URLs after apply"


# --- IAM ----------------------------------------------------------------------------------------


IAM_TYPES = re.compile(r"^google_.+_iam_(member|binding|policy)$")


def test_no_iam_grant_is_public() -> None:
    for resource in _all_resources():
        if IAM_TYPES.match(resource.type):
            members = [resource.body.get("member", ""), *resource.body.get("members", [])]
            assert not PUBLIC & set(members), resource.address
    for path in all_dirs():
        for expr in _expressions(load(path)):
            assert expr not in PUBLIC
            if "${" in expr and any(p in expr for p in PUBLIC):
                # Only the validations that refuse them may name them.
                assert 'contains(["allUsers", "allAuthenticatedUsers"], m)' in expr, expr


def test_iam_is_additive_and_project_wide_only_where_nothing_finer_exists() -> None:
    for resource in _all_resources():
        assert not re.search(r"_iam_(binding|policy)$", resource.type), resource.address
    # The bootstrap's build account is another matter (tests/infra/test_bootstrap.py).
    project_roles = {
        r.body["role"]
        for r in _all_resources()
        if r.type == "google_project_iam_member" and r.file.parent.name != "bootstrap"
    }
    # Firestore has no per-database data-access grant for these clients; Cloud Trace and Cloud
    # Monitoring have no resource below the project.
    assert project_roles == {
        "roles/datastore.user",
        "roles/cloudtrace.agent",
        "roles/monitoring.metricWriter",
    }


def test_service_invokers_are_validated_never_public() -> None:
    for module in ("service", "relayflow"):
        for variable in load(MODULES / module).variables.values():
            if "invoker" in variable.name:
                conditions = [v["condition"] for v in variable.body["validation"]]
                assert any("allUsers" in c for c in conditions), variable.name


@pytest.mark.parametrize("role", ["api_viewers", "api_operators", "api_completers"])
def test_the_apis_callers_are_accounts_never_groups_or_the_public(role: str) -> None:
    variable = load(RELAYFLOW).variables[role].body
    (condition,) = [v["condition"] for v in variable["validation"]]
    pattern = re.search(r'regex\("(.+?)", m\)', condition)
    assert pattern, condition
    regex = pattern.group(1).replace("\\\\", "\\")
    for member in ("user:alice@acme.com", "serviceAccount:hook@p.iam.gserviceaccount.com"):
        assert re.fullmatch(regex, member), member
    # A group's members call with their own email, which the api would not find listed.
    for other in ("allUsers", "allAuthenticatedUsers", "group:oncall@acme.com", "alice@acme.com"):
        assert not re.fullmatch(regex, other), other


def test_the_api_reads_the_same_callers_iam_lets_in_each_by_its_role() -> None:
    relayflow = load(RELAYFLOW)
    env = relayflow.modules["api"].body["env"]
    emails = 'jsonencode([for m in var.{} : split(":", m)[1]])'
    # The build account views too: each deploy first asks GET /versions (versions check).
    assert (
        'RELAYFLOW_API_VIEWERS = jsonencode(concat([for m in var.api_viewers : split(":", m)[1]], '
        "[data.google_service_account.build.email]))"
    ) in env
    assert f"RELAYFLOW_API_OPERATORS = {emails.format('api_operators')}" in env
    # The push account completes the tokens of signals it pushes to /signals, nothing more.
    assert (
        'RELAYFLOW_API_COMPLETERS = jsonencode(concat([for m in var.api_completers : split(":", '
        "m)[1]], [data.google_service_account.pubsub_push.email]))"
    ) in env
    assert "RELAYFLOW_API_AUDIENCES = jsonencode(var.api_token_audiences)" in env
    assert relayflow.locals["api_people_members"] == (
        "${{for m in distinct(concat(var.api_viewers, var.api_operators)) : m => m}}"
    )
    assert relayflow.locals["api_completer_members"] == "${{for m in var.api_completers : m => m}}"


GCLOUD_CLIENT = "32555940559.apps.googleusercontent.com"


def test_the_api_admits_only_tokens_for_its_own_url_unless_told_otherwise() -> None:
    # Every ID token gcloud mints for a person has gcloud's OAuth client as its audience,
    # whatever service it was for: admitting it by default let any service the person ever
    # sent one to replay it against the api (issue 18).
    relayflow = load(RELAYFLOW)
    assert relayflow.variables["api_token_audiences"].body["default"] == []
    for path in env_dirs():
        assert load(path).variables["api_token_audiences"].body["default"] == [], path.name
    # Named explicitly, such tokens are young ones only: the age limit reaches the api with them.
    optional = relayflow.locals["api_optional_env"]
    assert (
        "length(var.api_token_audiences) == 0 ? {} : "
        "{RELAYFLOW_API_AUDIENCE_MAX_AGE_S = tostring(var.api_token_max_age_s)}"
    ) in optional
    assert "local.api_optional_env" in relayflow.modules["api"].body["env"]
    max_age = relayflow.variables["api_token_max_age_s"].body
    assert max_age["default"] == 300
    assert "var.api_token_max_age_s <= 3600" in max_age["validation"][0]["condition"]
    # What a person runs instead: a token minted for the api's own URL, handed to the proxy.
    command = relayflow.outputs["api_proxy_command"].body["value"]
    assert '--audiences=${local.url["api"]}' in command and "--token=" in command
    for path in env_dirs():
        example = (path / "terraform.tfvars.example").read_text(encoding="utf-8")
        assert f'# api_token_audiences = ["{GCLOUD_CLIENT}"]' in example, path.name


def test_the_api_origins_reach_the_api_only_when_set() -> None:
    relayflow = load(RELAYFLOW)
    variable = relayflow.variables["api_origins"].body
    assert variable["type"] == "${list(string)}" and variable["default"] == []
    assert "RELAYFLOW_API_ORIGINS" in variable["description"]
    assert "http://localhost:8080" in variable["description"]
    optional = relayflow.locals["api_optional_env"]
    assert (
        "length(var.api_origins) == 0 ? {} : {RELAYFLOW_API_ORIGINS = jsonencode(var.api_origins)}"
    ) in optional
    for call in ("start_flow", "worker", "poller"):
        assert "RELAYFLOW_API_ORIGINS" not in _env_of(relayflow.modules[call].body, relayflow)
    for path in env_dirs():
        assert load(path).variables["api_origins"].body["default"] == [], path.name


IDENTITY_PATTERNS = {
    r"module\.(start_flow|worker|poller|api)\.service_account_member": None,
    r"google_service_account\.tasks_invoker\b": "tasks-invoker",
    r"google_service_account\.pubsub_push\b": "pubsub-push",
    r"google_service_account\.scheduler\b": "scheduler",
    r"google_service_account\.build\b": "build",
    r"google_project_service_identity\.pubsub\b": "pubsub-service-agent",
    r"google_project_service_identity\.firestore\b": "firestore-service-agent",
    r"google_project_service_identity\.cloudtasks\b": "tasks-service-agent",
    r"data\.google_storage_project_service_account\.main\b": "storage-service-agent",
    r"data\.google_bigquery_default_service_account\.main\b": "bigquery-service-agent",
    r"var\.pubsub_service_agent\b": "pubsub-service-agent",
    r"var\.api_(?:viewers|operators)\b": "api-people",
    r"var\.api_completers\b": "api-completers",
    r"var\.request_publishers": "producers",
    r"var\.tenant_publishers": "tenant-producers",
    r"var\.api_member\b": "api",
    r"var\.signal_publishers": "signal-producers",
    r"var\.result_subscribers": "consumers",
    r"var\.dead_letter_replayers": "replayers",
}


def _identities(expr: Any, config: Config) -> set[str]:
    """Who an expression names, following locals (module.worker... -> worker)."""
    found: set[str] = set()
    for text in strings(expr):
        for pattern, identity in IDENTITY_PATTERNS.items():
            for match in re.finditer(pattern, text):
                found.add(identity or COMPONENTS[match.group(1)])
        for name in references(text, "local"):
            found |= _identities(config.locals[name], config)
    return found


def _members(resource: Block, config: Config) -> set[str]:
    member = resource.body["member"]
    source = resource.body["for_each"] if member.startswith("${each.") else member
    return _identities(source, config)


_NAMED_TARGET = re.compile(
    r'\w+\.\w+\["([\w-]+)"\]|\["([\w-]+)"\]|google_service_account\.(\w+)'
    r"|google_pubsub_\w+\.(\w+)|var\.start_subscription\.(\w+)|google_bigquery_table\.(\w+)"
)


def _targets(resource: Block, config: Config) -> set[str]:
    """What a grant is on: a role key (["results"]) names it best, else the resource or input
    named; a target taken from for_each (each.value) is every one its map names."""
    body = resource.body
    kind = resource.type.removeprefix("google_").removesuffix("_iam_member")
    if kind == "project":
        return {"project"}
    if kind == "cloud_tasks_queue":
        return {"queue:each"}
    if kind == "storage_bucket":  # the bucket a module makes: module.offload.name
        return {f"{kind}:{m}" for m in re.findall(r"module\.(\w+)\.name", body["bucket"])}
    key = (
        body.get("topic")
        or body.get("service_account_id")
        or body.get("subscription")
        or body.get("table_id")
    )
    if key.startswith("${each."):
        key = _expand(body["for_each"], config)
    named = {next(g for g in m.groups() if g) for m in _NAMED_TARGET.finditer(key)}
    assert named, key
    # The bootstrap keys its identities by role (tasks-invoker); the env named them tasks_invoker.
    return {f"{kind}:{name.replace('-', '_')}" for name in named}


RUN_GRANT_ARGUMENTS = (("invoker_members", "run.invoker"), ("viewer_members", "run.viewer"))


def _run_grants(relayflow: Config) -> set[tuple[str, str, str]]:
    grants = set()
    for call, component in COMPONENTS.items():
        for argument, role in (
            ("invoker_members", "run.invoker"),
            ("viewer_members", "run.viewer"),
        ):
            members = relayflow.modules[call].body.get(argument, {})
            for who in _identities(members, relayflow):
                grants.add((who, f"roles/{role}", f"cloud_run:{component}"))
    return grants


def _keyed_grants(resource: Block, config: Config) -> set[tuple[str, str]]:
    """(who, target) of a grant whose for_each maps each key to its own member, on the key's
    own resource (a Cloud KMS key by store: crypto_key_id = module.kms.ids[each.key])."""
    kind = resource.type.removeprefix("google_").removesuffix("_iam_member")
    source = str(config.locals[references(resource.body["for_each"], "local").pop()])
    literal = re.search(r"\{([^{}]+)\}", source)  # the map literal: {KEY = MEMBER, ...}
    assert literal, source
    pairs = re.findall(r"(\w+)\s*=\s*([^\s,]+)", literal.group(1))
    return {(who, f"{kind}:{key}") for key, member in pairs for who in _identities(member, config)}


def _iam_matrix() -> set[tuple[str, str, str]]:
    relayflow = load(RELAYFLOW)
    messaging = load(MODULES / "messaging")
    grants = _run_grants(relayflow) | _bootstrap_identity_grants()
    # The analytics module's targets are its own (its dead-letter topic is not messaging's).
    for config, where in (
        (relayflow, ""),
        (messaging, ""),
        (load(MODULES / "analytics"), "analytics/"),
    ):
        for resource in config.resources:
            if resource.type.endswith("_iam_member") and "[each.key]" in str(resource.body):
                grants |= {
                    (w, resource.body["role"], t) for w, t in _keyed_grants(resource, config)
                }
            elif resource.type.endswith("_iam_member"):
                for who in _members(resource, config):
                    for target in _targets(resource, config):
                        for role in _roles(resource, config):
                            grants.add((who, role, f"{where}{target}"))
    return grants


def _roles(resource: Block, config: Config) -> set[str]:
    """The role a grant gives, or each its for_each names (``each.value``)."""
    role = str(resource.body["role"])
    if not role.startswith("${each."):
        return {role}
    return set(re.findall(r"roles/[\w.]+", _expand(resource.body["for_each"], config)))


def _bootstrap_identity_grants() -> set[tuple[str, str, str]]:
    """What the bootstrap grants relayflow's identities (it creates them; what it grants the
    build and test accounts is tests/infra/test_bootstrap.py's)."""
    boot = load(MODULES / "bootstrap")
    grants = set()
    for resource in boot.resources:
        member = resource.body.get("member", "")
        if not resource.type.endswith("_iam_member") or not (
            "google_service_account.relayflow" in member or "service_identity" in member
        ):
            continue
        if "[each.key]" in member:  # one of relayflow's accounts per for_each key
            keys = _expand(resource.body["for_each"], boot)
            who = set(re.findall(r"""["']([\w-]+)["']""", keys))
        else:
            who = _identities(member, boot)
        for identity in who:
            for target in _targets(resource, boot):
                grants.add((identity, resource.body["role"], target))
    return grants


RUNTIME = sorted(COMPONENTS.values())
ENCRYPTER = "roles/cloudkms.cryptoKeyEncrypterDecrypter"
EXPECTED_IAM = {
    # Project-wide only because Firestore has nothing finer.
    *{(c, "roles/datastore.user", "project") for c in RUNTIME},
    *{(c, "roles/cloudtrace.agent", "project") for c in RUNTIME},
    *{(c, "roles/monitoring.metricWriter", "project") for c in RUNTIME},
    # On every queue of the topology (steps, polls and their high twins), not the project.
    *{(c, "roles/cloudtasks.enqueuer", "queue:each") for c in RUNTIME},
    ("worker", "roles/cloudtasks.viewer", "queue:each"),
    # GetTask: the sweeper's question (worker), the polls in flight a reader sees (api).
    ("api", "roles/cloudtasks.viewer", "queue:each"),
    # RunTask: put-off tasks brought forward when a breaker closes (worker, poller) or when an
    # operator resumes a tenant (api).
    *{(c, "roles/cloudtasks.taskRunner", "queue:each") for c in ("worker", "poller", "api")},
    # Tasks carry an OIDC token of the tasks-invoker account: actAs on that account only.
    *{(c, "roles/iam.serviceAccountUser", "service_account:tasks_invoker") for c in RUNTIME},
    # Whoever settles a terminal flow publishes its one result event.
    *{(c, "roles/pubsub.publisher", "pubsub_topic:results") for c in RUNTIME},
    ("pubsub-service-agent", "roles/iam.serviceAccountTokenCreator", "service_account:pubsub_push"),
    # Dead-lettering: the agent republishes to the dead-letter topic and acks on start.
    ("pubsub-service-agent", "roles/pubsub.publisher", "pubsub_topic:dead_letter_topic"),
    ("pubsub-service-agent", "roles/pubsub.subscriber", "pubsub_subscription:start"),
    ("pubsub-service-agent", "roles/pubsub.subscriber", "pubsub_subscription:signals"),
    # ... and on each named tenant's own start subscription.
    ("pubsub-service-agent", "roles/pubsub.subscriber", "pubsub_subscription:tenant"),
    # Producers and consumers outside relayflow (variables), each on one topic or subscription:
    # the shared requests topic starts the default tenant's flows, a named tenant's producers
    # publish on that tenant's own topic (tests/infra/test_tenants.py: on it alone).
    ("producers", "roles/pubsub.publisher", "pubsub_topic:requests"),
    ("tenant-producers", "roles/pubsub.publisher", "pubsub_topic:tenant"),
    ("consumers", "roles/pubsub.subscriber", "pubsub_topic:results"),
    # Dead letters are replayed where they came from: requests, a tenant's topic, signals.
    ("replayers", "roles/pubsub.subscriber", "pubsub_subscription:dead_letter"),
    ("replayers", "roles/pubsub.publisher", "pubsub_topic:requests"),
    ("replayers", "roles/pubsub.publisher", "pubsub_topic:tenant"),
    # The console's and the CLI's dead-letter pages run as the api: the same rights, no more
    # (pull, modifyAckDeadline and acknowledge on the hold; publish on the replay targets).
    ("api", "roles/pubsub.subscriber", "pubsub_subscription:dead_letter"),
    ("api", "roles/pubsub.publisher", "pubsub_topic:requests"),
    ("api", "roles/pubsub.publisher", "pubsub_topic:tenant"),
    ("api", "roles/pubsub.publisher", "pubsub_topic:signals"),
    # External systems complete callback tokens on the signals topic; a dead-lettered signal is
    # replayed there.
    ("signal-producers", "roles/pubsub.publisher", "pubsub_topic:signals"),
    ("replayers", "roles/pubsub.publisher", "pubsub_topic:signals"),
    # Offloaded payloads: every component writes some (inputs, outputs, results, callback
    # outputs, signals) and reads them back; none may replace or delete one.
    *{(c, "roles/storage.objectCreator", "storage_bucket:offload") for c in RUNTIME},
    *{(c, "roles/storage.objectViewer", "storage_bucket:offload") for c in RUNTIME},
    # With CMEK on, each store's service agent may use its own store's key and no other.
    ("firestore-service-agent", ENCRYPTER, "kms_crypto_key:firestore"),
    ("pubsub-service-agent", ENCRYPTER, "kms_crypto_key:pubsub"),
    ("tasks-service-agent", ENCRYPTER, "kms_crypto_key:tasks"),
    ("storage-service-agent", ENCRYPTER, "kms_crypto_key:storage"),
    ("bigquery-service-agent", ENCRYPTER, "kms_crypto_key:bigquery"),
    # Who may call which service.
    ("pubsub-push", "roles/run.invoker", "cloud_run:start-flow"),
    # Signals are pushed to the api's /signals as the same account.
    ("pubsub-push", "roles/run.invoker", "cloud_run:api"),
    ("tasks-invoker", "roles/run.invoker", "cloud_run:worker"),
    ("tasks-invoker", "roles/run.invoker", "cloud_run:poller"),
    ("scheduler", "roles/run.invoker", "cloud_run:worker"),
    ("api-people", "roles/run.invoker", "cloud_run:api"),
    # gcloud run services proxy reads the service before it forwards.
    ("api-people", "roles/run.viewer", "cloud_run:api"),
    # Systems that complete callback tokens over HTTP only invoke.
    ("api-completers", "roles/run.invoker", "cloud_run:api"),
    # Each deploy first asks the api how many flows run on each version (versions check).
    ("build", "roles/run.invoker", "cloud_run:api"),
    # The BigQuery subscription writes result events as the Pub/Sub agent: this table only,
    # and what it gives up goes to the analytics dead-letter topic (acked on its subscription).
    ("pubsub-service-agent", "roles/bigquery.dataEditor", "analytics/bigquery_table:main"),
    ("pubsub-service-agent", "roles/bigquery.metadataViewer", "analytics/bigquery_table:main"),
    ("pubsub-service-agent", "roles/pubsub.publisher", "analytics/pubsub_topic:dead_letter"),
    ("pubsub-service-agent", "roles/pubsub.subscriber", "analytics/pubsub_subscription:main"),
}


def test_the_iam_matrix_is_exactly_the_intended_one() -> None:
    assert _iam_matrix() == EXPECTED_IAM


def test_the_api_may_list_and_replay_dead_letters_and_nothing_more_on_pubsub() -> None:
    # relayflow.gcp.dead_letters pulls from the hold subscription, releases what it read
    # (modifyAckDeadline 0) and acknowledges a replayed one: roles/pubsub.subscriber on that
    # subscription; a replay publishes back where the letter came from.
    relayflow, messaging = load(RELAYFLOW), load(MODULES / "messaging")
    assert relayflow.modules["messaging"].body["api_member"] == (
        "${module.api.service_account_member}"
    )
    reader = messaging.resource("google_pubsub_subscription_iam_member", "api_dead_letter_reader")
    assert reader.body["subscription"] == '${google_pubsub_subscription.hold["dead_letter"].name}'
    assert reader.body["role"] == "roles/pubsub.subscriber"
    replayer = messaging.resource("google_pubsub_topic_iam_member", "api_dead_letter_replayer")
    assert replayer.body["for_each"] == "${local.replay_topics}"
    assert replayer.body["role"] == "roles/pubsub.publisher"
    targets = messaging.locals["replay_topics"]
    for topic in ('google_pubsub_topic.main["requests"]', 'google_pubsub_topic.main["signals"]'):
        assert topic in targets
    assert "for tenant, topic in google_pubsub_topic.tenant" in targets
    api_grants = {
        (role, target) for who, role, target in _iam_matrix() if who == "api" and "pubsub" in role
    }
    assert api_grants == {
        ("roles/pubsub.subscriber", "pubsub_subscription:dead_letter"),
        *{
            ("roles/pubsub.publisher", f"pubsub_topic:{t}")
            for t in ("requests", "tenant", "signals", "results")
        },
    }


def test_queue_grants_cover_every_topology_queue() -> None:
    relayflow = load(RELAYFLOW)
    enqueuer = relayflow.resource("google_cloud_tasks_queue_iam_member", "enqueuer").body
    # local.queues: every shard of every topology queue.
    assert "keys(local.queues)" in relayflow.locals["enqueue_grants"]
    assert enqueuer["name"] == "${module.queues.names[each.value.queue]}"
    viewer = relayflow.resource("google_cloud_tasks_queue_iam_member", "sweeper_viewer").body
    assert viewer["for_each"] == "${module.queues.names}"


def test_every_topology_queue_is_provisioned_granted_to_its_enqueuers_and_monitored() -> None:
    roles = set(topology()["queues"])
    assert roles == {"steps", "polls", "steps_high", "polls_high"}
    relayflow = load(RELAYFLOW)
    queues = load(MODULES / "queues")
    # Provisioned: every shard of each topology entry (local.queues), named by role (role-i
    # for shard i) in the module's outputs, from both of its queue resources.
    assert relayflow.modules["queues"].body["queues"] == "${local.queues}"
    assert "for role, q in local.topology.queues" in relayflow.locals["queues"]
    assert queues.resource("google_cloud_tasks_queue", "main").body["for_each"] == (
        "${local.first}"
    )
    assert queues.resource("google_cloud_tasks_queue", "shard").body["for_each"] == (
        "${local.more}"
    )
    assert queues.outputs["names"].body["value"] == (
        "${merge({for k, q in google_cloud_tasks_queue.main : k => q.name}, "
        "{for k, q in google_cloud_tasks_queue.shard : k => q.name})}"
    )
    # Granted: every runtime account enqueues on every queue (a start, a step, a poll, a retry
    # or a rescue of a high-priority tenant's flow goes on a high queue), the sweeper reads all.
    grants = relayflow.locals["enqueue_grants"]
    assert "setproduct(keys(local.runtime_members), keys(local.queues))" in grants
    assert set(relayflow.locals["runtime_members"]) == set(COMPONENTS.values())
    enqueuers = {
        who
        for r in relayflow.resources_of("google_cloud_tasks_queue_iam_member")
        if r.body["role"] == "roles/cloudtasks.enqueuer"
        for who in _members(r, relayflow)
    }
    assert enqueuers == set(COMPONENTS.values())
    # Monitored: the failing-attempts alert and the dashboard read every kind's name, with
    # each of its shards (NAME-i) by pattern.
    call = relayflow.modules["monitoring"].body
    assert call["queues"] == "${[for role, q in local.topology.queues : q.name]}"
    assert call["queue_shards"] == "${local.queue_shards}"
    monitoring = (MODULES / "monitoring" / "main.tf").read_text(encoding="utf-8")
    pattern = '(${join("|", var.queues)})(-[1-9][0-9]*)?'
    assert f'monitoring.regex.full_match(\\"{pattern}\\")' in monitoring
    assert f'queues_regex = "{pattern}"' in monitoring
    assert "queues_regex             = local.queues_regex" in monitoring


def _runtime_targets() -> dict[str, str]:
    """Queue role -> service, as relayflow.runtime.task_targets routes tasks."""
    runtime = (TERRAFORM.parents[1] / "relayflow" / "runtime.py").read_text(encoding="utf-8")
    body = runtime[runtime.index("def task_targets(") :]
    body = body[: body.index("\ndef ")]
    routes = {}
    for kind, service in (("steps", "worker"), ("polls", "poller")):
        (queues,) = re.findall(rf"for {kind} in \(([^)]*)\)", body)
        routes |= {role: service for role in re.findall(r"queues\.(\w+)", queues)}
    return routes


def test_each_queue_goes_to_the_service_the_runtime_sends_it_to() -> None:
    relayflow = load(RELAYFLOW)
    service = relayflow.locals["queue_service"]
    assert service == _runtime_targets()
    assert set(service) == set(topology()["queues"])


def test_task_handlers_wait_as_long_as_the_longest_dispatch_deadline_they_serve() -> None:
    relayflow = load(RELAYFLOW)
    for call in ("worker", "poller"):
        assert relayflow.modules[call].body["request_timeout_s"] == (
            f'${{local.handler_timeout_s["{call}"]}}'
        )
    timeouts = relayflow.locals["handler_timeout_s"]
    assert "local.topology.queues[role].dispatch_deadline_s if target == service" in timeouts
    assert timeouts.startswith("${{for service in distinct(values(local.queue_service)) :")
    assert "max([" in timeouts
    # What that evaluates to today, for the reader: steps 120 s, polls 60 s.
    deadlines = {
        target: max(
            topology()["queues"][role]["dispatch_deadline_s"]
            for role, t in relayflow.locals["queue_service"].items()
            if t == target
        )
        for target in ("worker", "poller")
    }
    assert deadlines == {"worker": 120, "poller": 60}


def test_the_scheduler_posts_sweep_to_the_worker_as_the_scheduler_account() -> None:
    job = load(RELAYFLOW).resource("google_cloud_scheduler_job", "sweep").body
    target = only_block(job, "http_target")
    assert target["http_method"] == "POST"
    assert target["uri"] == '${local.url["worker"]}/sweep'
    token = only_block(target, "oidc_token")
    assert token["service_account_email"] == "${data.google_service_account.scheduler.email}"
    assert token["audience"] == '${local.url["worker"]}'


def test_the_service_module_grants_invoker_and_viewer_only_from_its_inputs() -> None:
    service = load(MODULES / "service")
    grants = {r.name: r.body for r in service.resources if r.type.endswith("_iam_member")}
    assert set(grants) == {"invoker", "viewer"}
    assert grants["invoker"]["for_each"] == "${var.invoker_members}"
    assert grants["invoker"]["role"] == "roles/run.invoker"
    assert grants["viewer"]["for_each"] == "${var.viewer_members}"
    assert grants["viewer"]["role"] == "roles/run.viewer"
    assert grants["invoker"]["member"] == grants["viewer"]["member"] == "${each.value}"


def test_env_roots_grant_nobody_the_api_by_default() -> None:
    for path in env_dirs():
        for role in ("api_viewers", "api_operators", "api_completers"):
            assert load(path).variables[role].body["default"] == [], role


# --- Environment roots expose the module ----------------------------------------------------------


@pytest.mark.parametrize("path", env_dirs(), ids=ids(env_dirs()))
def test_an_env_root_passes_every_module_input_and_outputs_every_module_output(path: Path) -> None:
    config = load(path)
    call = config.modules["relayflow"].body
    module = load(RELAYFLOW)
    assert set(call) - META_ARGUMENTS == set(module.variables)
    for name in module.variables:
        assert call[name] == f"${{var.{name}}}", name
    assert {n: o.body["value"] for n, o in config.outputs.items()} == {
        n: f"${{module.relayflow.{n}}}" for n in module.outputs
    }


def test_what_differs_between_environments_differs_in_their_defaults() -> None:
    defaults = {
        p.name: {n: v.body.get("default") for n, v in load(p).variables.items()} for p in env_dirs()
    }
    assert defaults["prod"]["deletion_protection"] is True
    assert defaults["dev"]["deletion_protection"] is False
    assert defaults["prod"]["firestore_point_in_time_recovery"] is True
    assert defaults["prod"]["min_instances"]["worker"] >= 1
    assert defaults["dev"]["max_instances"]["worker"] < defaults["prod"]["max_instances"]["worker"]


# --- Operators reach the api --------------------------------------------------------------------


def test_operators_reach_the_api_through_the_proxy_and_nothing_else_is_reachable() -> None:
    relayflow = load(RELAYFLOW)
    for call in ("start_flow", "worker", "poller"):
        assert "ingress" not in relayflow.modules[call].body, "internal-only, the default"
    api = relayflow.modules["api"].body
    assert api["ingress"] == "${var.api_ingress}"
    assert relayflow.variables["api_ingress"].body["default"] == "INGRESS_TRAFFIC_ALL"
    assert api["viewer_members"] == "${local.api_people_members}"
    assert api["invoker_members"] == (
        "${merge(local.api_people_members, local.api_completer_members, "
        "{pubsub_push = local.pubsub_push_member, versions_check = local.build_member})}"
    )
    assert relayflow.locals["build_member"] == (
        "serviceAccount:${data.google_service_account.build.email}"
    )
    command = relayflow.outputs["api_proxy_command"].body["value"]
    assert command.startswith("gcloud run services proxy ${module.api.name} --project")


# --- Firestore index exemptions (issue 7) -------------------------------------------------------

QUERIED = {
    "admission",
    "queued_at",
    "status",
    "updated_at",
    "next_run_at",
    "finished_at",
    "result_published",
    "flow",
    "version",
    "tenant",
    "created_at",
    "id_spread",  # Store.find: which tenants' flows have an id (the api, by id)
    # Counts by label and by dependency merge these single-field indexes (test_list_indexes)
    "label_index",
    "dependency",
}
# Ids callers number (relayflow.capacity.rules.CALLER_ORDERED): they rise with the flows, so no
# single-field index; flow_id stays in the listings' composites (after shard and updated_at) to
# break ties, and find asks the spread copy of it (id_spread) instead.
FLOW_KEYS = {"flow_id", "parent", "message_id"}
# (cleanup: read with the document, never queried)
# Signals kept for a WaitForSignal and the ids taken: read with the document only.
SIGNALS = {"signals", "signal_ids"}
LARGE = {"input", "outputs", "history", "result", "pending_result", "effects", "tracks", "cleanup"}
LARGE |= SIGNALS
# A child flow's parent and the tasks its end makes (their run_at times rise with the flows).
CHILDREN = {"child_of"}
LARGE |= CHILDREN
LARGE |= {"reset"}  # an operator's reset to a step: its steps run again, its undos left
# A flow's labels (a map: an entry a key): queried through label_index, never themselves.
LABELS = {"labels"}
LARGE |= LABELS
# A lane's own key and its flow's: they rise with the flows' ids and nothing finds lanes by them.
LANE_KEYS = {"flow_id", "parent", "message_id"}
# A ForEach lane's document: a flow document plus its items and their outputs.
LANE_LARGE = {
    "input",
    "outputs",
    "history",
    "items",
    "item_outputs",
    "effects",
    "tracks",
    "result",
    "pending_result",
    "cleanup",  # a lane that undoes its item keeps its clean-up (with times) here too
}
LANE_LARGE |= SIGNALS | CHILDREN | LABELS


def test_the_large_flow_fields_are_exempt_from_indexing_and_the_queried_ones_are_not() -> None:
    unindexed = load(RELAYFLOW).locals["unindexed_fields"]
    flows = unindexed["${(local.topology.firestore.flows_collection)}"]
    assert set(flows) >= LARGE
    assert not (QUERIED - MONOTONIC) & set(flows)
    assert MONOTONIC & set(FlowRecord.model_fields) - {"step_started_at"} <= set(flows)
    assert set(flows) >= FLOW_KEYS
    indexed_by_composites = {
        f["field_path"]
        for index in load(RELAYFLOW).modules["firestore"].body["composite_indexes"].values()
        for f in index["fields"]
    }
    assert not (indexed_by_composites - MONOTONIC - FLOW_KEYS) & set(flows)
    assert load(RELAYFLOW).modules["firestore"].body["unindexed_fields"] == (
        "${local.unindexed_fields}"
    )


def test_an_exemption_switches_off_every_single_field_index() -> None:
    field = load(MODULES / "firestore").resource("google_firestore_field", "unindexed").body
    assert field["for_each"] == "${local.unindexed}"
    (index_config,) = field["index_config"]
    assert set(index_config) == {"__is_block__"}, "an empty index_config disables indexing"
    assert "ttl_config" not in field


def test_the_large_lane_fields_are_exempt_from_indexing_and_the_queried_ones_are_not() -> None:
    unindexed = load(RELAYFLOW).locals["unindexed_fields"]
    lanes = unindexed["${(local.topology.firestore.lanes_collection)}"]
    moving = MONOTONIC & set(FlowRecord.model_fields) | LANE_KEYS
    assert set(lanes) == LANE_LARGE | moving and len(lanes) == len(LANE_LARGE | moving)
    assert not (QUERIED - MONOTONIC - LANE_KEYS) & set(lanes)
    assert "expire_at" not in lanes, "the TTL field has its own google_firestore_field"
    # Every exempted field is a field of the record the store writes.
    stored = set(FlowRecord.model_fields)
    assert not (LANE_LARGE | LARGE) - stored


# Collections whose documents are a few scalars each: nothing to exempt (tenant states: paused,
# by, reason).
SMALL_DOCUMENTS = {"tenants_collection"}
# Live state rewritten on every transition or call outcome: the lists and maps in it; and a
# tenant slot's times and holder, which move with the flows.
LIVE_LARGE = {
    "breakers_collection": {"transitions"},
    "breaker_windows_collection": {"buckets"},
    "tenant_slots_collection": {"taken_at", "free_at", "holder"},
}
# What the engine finds these documents by (single-field indexes, kept).
LIVE_QUERIED = {"tenant", "dependency"}


def test_every_firestore_collection_of_the_topology_has_its_large_fields_exempt() -> None:
    unindexed = load(RELAYFLOW).locals["unindexed_fields"]
    collections = {k for k in topology()["firestore"] if k.endswith("_collection")}
    exempting = collections - SMALL_DOCUMENTS
    assert set(unindexed) == {f"${{(local.topology.firestore.{k})}}" for k in exempting}
    for key, fields in LIVE_LARGE.items():
        exempt = set(unindexed[f"${{(local.topology.firestore.{key})}}"])
        assert exempt == fields, key
        assert not exempt & (LIVE_QUERIED | QUERIED), key


# --- Callbacks reach the api --------------------------------------------------------------------


def test_callback_steps_hand_out_the_api_url() -> None:
    relayflow = load(RELAYFLOW)
    # Every component loads the app, whose callback steps hand out {RELAYFLOW_API_URL}/callbacks
    # (the token apart, in a header: never in a URL).
    assert relayflow.locals["common_env"]["RELAYFLOW_API_URL"] == '${local.url["api"]}'
    assert "api_url" in Settings.model_fields
    assert relayflow.modules["api"].body["custom_audiences"] == ['${local.url["api"]}']
    url = relayflow.outputs["callback_url"].body["value"]
    assert url == '${local.url["api"]}/callbacks'
    assert "X-Relayflow-Callback-Token" in relayflow.outputs["callback_url"].body["description"]


def test_a_gunicorn_service_has_as_many_threads_as_cloud_run_sends_it_requests() -> None:
    relayflow = load(RELAYFLOW)
    for call in ("worker", "poller", "api"):
        body = relayflow.modules[call].body
        assert body["max_concurrency"] == f'${{var.concurrency["{call}"]}}', call
        assert f'GUNICORN_THREADS = tostring(var.concurrency["{call}"])' in body["env"], call
    assert relayflow.modules["start_flow"].body["max_concurrency"] == (
        '${var.concurrency["start-flow"]}'
    )
    entrypoint = (TERRAFORM.parents[1] / "deploy" / "entrypoint.sh").read_text()
    assert '--threads "${GUNICORN_THREADS}"' in entrypoint


def test_no_index_over_a_time_that_moves_forward_lacks_the_shard_first() -> None:
    # Firestore takes about 500 writes/s on one index range (best practices, "narrow document
    # range"): a time written at the flow rate is indexed only behind the shard.
    indexes = load(RELAYFLOW).modules["firestore"].body["composite_indexes"]
    for label, index in indexes.items():
        paths = [f["field_path"] for f in index["fields"]]
        if MONOTONIC & set(paths):
            assert index["fields"][0] == {"field_path": "shard", "order": "ASCENDING"}, label
    unindexed = load(RELAYFLOW).locals["unindexed_fields"]
    for key in ("flows_collection", "lanes_collection"):
        exempt = set(unindexed[f"${{(local.topology.firestore.{key})}}"])
        stored = {n for n, f in FlowRecord.model_fields.items() if not f.exclude}
        times = {n for n in stored if "datetime" in str(FlowRecord.model_fields[n].annotation)}
        assert times - {"expire_at"} <= exempt, key  # expire_at: the TTL field, unindexed too
    rejected = set(unindexed["${(local.topology.firestore.rejected_collection)}"])
    assert {"rejected_at", "message_id"} <= rejected


def test_one_fixed_scheduler_job_posts_the_schedules_tick_every_minute() -> None:
    # One job for every schedule of the app: adding one is a deploy, never a Terraform edit.
    relayflow = load(RELAYFLOW)
    jobs = {r.name for r in relayflow.resources_of("google_cloud_scheduler_job")}
    assert jobs == {"sweep", "schedules"}
    job = relayflow.resource("google_cloud_scheduler_job", "schedules").body
    assert (job["schedule"], job["time_zone"]) == ("* * * * *", "Etc/UTC")
    assert only_block(job, "retry_config")["retry_count"] == 0  # the next minute catches up
    target = only_block(job, "http_target")
    assert target["http_method"] == "POST"
    assert target["uri"] == '${local.url["worker"]}/schedules/tick'
    token = only_block(target, "oidc_token")
    # The sweep's identity: it may invoke the worker and nothing else.
    assert token["service_account_email"] == "${data.google_service_account.scheduler.email}"
    assert token["audience"] == '${local.url["worker"]}'
    sweep = relayflow.resource("google_cloud_scheduler_job", "sweep").body
    assert job["depends_on"] == sweep["depends_on"]


def test_the_worker_serves_the_tick_route_the_job_posts_to() -> None:
    services = (TERRAFORM.parents[1] / "relayflow" / "web" / "services.py").read_text()
    assert 'SCHEDULES_TICK_PATH = "/schedules/tick"' in services
    assert "@_authenticated(sweep_verifier or verifier)" in services.split("def tick_schedules")[0]

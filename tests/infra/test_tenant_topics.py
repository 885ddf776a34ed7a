"""Publishers bound to tenants (issue 18): each tenant named in ``tenants`` gets its own start
topic and push subscription, delivering as the shared one does, to a path that names the topic;
``tenant_publishers`` may publish on their tenant's topic and nowhere else.

The start function takes a message's tenant from the topic it came by (the shared requests
topic starts the default tenant's flows only), so the names Terraform builds must be the ones
relayflow.topology builds; where the terraform binary is installed they are checked by running
the module's own variables, locals and output precondition (no provider is needed).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tfconfig import MODULES, TOPOLOGY_FILE, env_dirs, load, only_block
from tfprobe import block as _block
from tfprobe import needs_terraform, outputs, run, write_calls

from relayflow.topology import load_topology, tenant_of_topic, topic_of_source

RELAYFLOW = MODULES / "relayflow"
MESSAGING = MODULES / "messaging"
# What every start subscription shares with the shared one, attribute by attribute.
SAME_AS_START = {
    "ack_deadline_seconds": "${var.start_subscription.ack_deadline_s}",
    "depends_on": ["${var.push_after}"],
}


def _subscription(name: str) -> dict[str, Any]:
    body: dict[str, Any] = load(MESSAGING).resource("google_pubsub_subscription", name).body
    return body


# --- A topic and a subscription per named tenant -------------------------------------------------


def test_each_named_tenant_gets_a_topic_and_a_subscription_named_by_the_topology() -> None:
    relayflow = load(RELAYFLOW)
    built = relayflow.locals["tenant_requests"]
    assert built.startswith("${{for tenant in keys(coalesce(var.tenants.tenants, {})) :")
    assert 'replace(local.topology.tenant_requests.topic, "{tenant}", tenant)' in built
    assert 'replace(local.topology.tenant_requests.subscription, "{tenant}", tenant)' in built
    assert relayflow.modules["messaging"].body["tenant_requests"] == "${local.tenant_requests}"
    messaging = load(MESSAGING)
    topic = messaging.resource("google_pubsub_topic", "tenant").body
    assert topic["for_each"] == "${var.tenant_requests}"
    assert topic["name"] == "${each.value.topic}"
    subscription = _subscription("tenant")
    assert subscription["for_each"] == "${var.tenant_requests}"
    assert subscription["name"] == "${each.value.subscription}"
    assert subscription["topic"] == "${google_pubsub_topic.tenant[each.key].id}"
    # The topology's placeholders are the ones Terraform fills in.
    section = json.loads(TOPOLOGY_FILE.read_text(encoding="utf-8"))["tenant_requests"]
    assert "{tenant}" in section["topic"] and "{tenant}" in section["subscription"]


def test_a_tenants_subscription_delivers_as_the_shared_start_subscription() -> None:
    start, tenant = _subscription("start"), _subscription("tenant")
    for attribute, value in SAME_AS_START.items():
        assert start[attribute] == tenant[attribute] == value, attribute
    for block in ("retry_policy", "dead_letter_policy", "expiration_policy"):
        assert only_block(tenant, block) == only_block(start, block), block
    # The same OIDC token (push account, start-flow's audience) to the same function.
    start_push, tenant_push = only_block(start, "push_config"), only_block(tenant, "push_config")
    assert only_block(tenant_push, "oidc_token") == only_block(start_push, "oidc_token")
    assert only_block(tenant, "dead_letter_policy")["dead_letter_topic"] == (
        "${local.topic_ids[var.start_subscription.dead_letter_topic]}"
    )
    assert only_block(tenant, "expiration_policy")["ttl"] == ""


def test_every_start_subscription_pushes_to_a_path_naming_its_own_topic() -> None:
    messaging = load(MESSAGING)
    assert messaging.locals["push_path"] == "${var.push_url}/projects/${var.project_id}/topics"
    start = only_block(_subscription("start"), "push_config")["push_endpoint"]
    tenant = only_block(_subscription("tenant"), "push_config")["push_endpoint"]
    assert start == "${local.push_path}/${var.start_subscription.topic}"
    assert tenant == "${local.push_path}/${each.value.topic}"
    assert load(RELAYFLOW).modules["messaging"].body["push_url"] == "${module.start_flow.uri}"
    # functions-framework makes that path the CloudEvent's source; the start function reads
    # the tenant from it: a tenant's own topic is the tenant's, the shared one the default's.
    topology = load_topology()
    for topic, tenant_name in (
        (topology.tenant_requests.topic_of("acme"), "acme"),
        (topology.topics.requests, "default"),
    ):
        source = topic_of_source(f"//pubsub.googleapis.com/projects/p/topics/{topic}")
        assert source == topic
        assert tenant_of_topic(topology, source) == tenant_name


def test_the_pubsub_service_agent_may_dead_letter_from_each_tenants_subscription() -> None:
    grant = (
        load(MESSAGING)
        .resource("google_pubsub_subscription_iam_member", "tenant_dead_letter_subscriber")
        .body
    )
    assert grant["for_each"] == "${google_pubsub_subscription.tenant}"
    assert grant["subscription"] == "${each.value.name}"
    assert (grant["role"], grant["member"]) == (
        "roles/pubsub.subscriber",
        "${var.pubsub_service_agent}",
    )


# --- Publishers, each on its tenant's topic only ------------------------------------------------


def test_tenant_publishers_publish_on_their_tenants_topic_and_nowhere_else() -> None:
    messaging = load(MESSAGING)
    grant = messaging.resource("google_pubsub_topic_iam_member", "tenant_publisher").body
    assert grant["for_each"] == "${local.tenant_publisher_grants}"
    assert grant["role"] == "roles/pubsub.publisher"
    assert grant["member"] == "${each.value.member}"
    assert grant["topic"] == (
        "${lookup({for t, topic in google_pubsub_topic.tenant : t => topic.name}, "
        'each.value.tenant, "")}'
    )
    (precondition,) = only_block(grant, "lifecycle")["precondition"]
    assert precondition["condition"] == "${contains(keys(var.tenant_requests), each.value.tenant)}"
    # No other grant reads tenant_publishers; the shared topic's publishers are another input.
    readers = [
        r.name
        for r in messaging.resources
        if "tenant_publisher" in json.dumps(r.body) or r.name == "tenant_publisher"
    ]
    assert readers == ["tenant_publisher"]
    shared = messaging.resource("google_pubsub_topic_iam_member", "request_publisher").body
    assert shared["for_each"] == "${var.request_publishers}"
    assert shared["topic"] == '${google_pubsub_topic.main["requests"].name}'


def test_the_shared_topics_publishers_are_described_as_the_default_tenants() -> None:
    for config in (load(RELAYFLOW), load(MESSAGING), *(load(p) for p in env_dirs())):
        description = config.variables["request_publishers"].body["description"]
        assert "default tenant's flows only" in description, config.path


def test_tenant_publishers_is_threaded_through_every_root_and_validated() -> None:
    relayflow = load(RELAYFLOW)
    variable = relayflow.variables["tenant_publishers"].body
    assert variable["type"] == "${map(map(string))}" and variable["default"] == {}
    conditions = " ".join(v["condition"] for v in variable["validation"])
    assert 'contains(["allUsers", "allAuthenticatedUsers"], m)' in conditions
    assert relayflow.modules["messaging"].body["tenant_publishers"] == "${var.tenant_publishers}"
    (named,) = relayflow.outputs["tenant_topics"].body["precondition"]
    assert named["condition"] == (
        "${alltrue([for tenant in keys(var.tenant_publishers) : "
        "contains(keys(local.tenant_requests), tenant)])}"
    )
    for path in env_dirs():
        env = load(path)
        assert env.variables["tenant_publishers"].body["default"] == {}
        assert env.modules["relayflow"].body["tenant_publishers"] == "${var.tenant_publishers}"
        assert env.outputs["tenant_topics"].body["value"] == "${module.relayflow.tenant_topics}"
        example = (path / "terraform.tfvars.example").read_text(encoding="utf-8")
        assert "# tenant_publishers     = { acme = { orders = " in example


# --- What Terraform builds, run by terraform itself ----------------------------------------------


def _probe(directory: Path) -> None:
    """The relayflow module's tenants and tenant_publishers variables, its tenant_requests
    local and its tenant_topics output (precondition included), the topics being what the
    local names."""
    variables = (RELAYFLOW / "variables.tf").read_text(encoding="utf-8")
    main = (RELAYFLOW / "main.tf").read_text(encoding="utf-8")
    outputs = (RELAYFLOW / "outputs.tf").read_text(encoding="utf-8")
    output = _block(outputs, 'output "tenant_topics" {').replace(
        "module.messaging.tenant_topic_names", "local.tenant_requests"
    )
    directory.mkdir()
    (directory / "main.tf").write_text(
        "\n\n".join(
            [
                _block(variables, 'variable "tenants" {'),
                _block(variables, 'variable "tenant_publishers" {'),
                "locals {\n"
                + f"  topology = jsondecode(file({json.dumps(str(TOPOLOGY_FILE))}))\n"
                + _block(main, "  tenant_requests = {")
                + "\n}",
                output,
            ]
        ),
        encoding="utf-8",
    )


def _terraform(root: Path, cases: dict[str, dict[str, Any]], *command: str) -> str:
    _probe(root / "probe")
    write_calls(root, cases, read=".tenant_topics")
    done = run(root, *command)
    return done.stdout + done.stderr


@needs_terraform
def test_terraform_names_each_tenants_topic_and_subscription_as_relayflow_does(
    tmp_path: Path,
) -> None:
    tenants = {"tenants": {"acme": {"max_running": 5}, "globex": {}}}
    publishers = {"acme": {"orders": "serviceAccount:orders@acme.iam.gserviceaccount.com"}}
    cases = {
        "named": {"tenants": tenants, "tenant_publishers": publishers},
        "none": {"tenants": {}},
    }
    output = _terraform(tmp_path, cases, "apply", "-auto-approve")
    assert "Apply complete" in output, output[-3000:]
    built = outputs(tmp_path)
    names = load_topology().tenant_requests
    assert built["named"] == {
        t: {"topic": names.topic_of(t), "subscription": names.subscription_of(t)}
        for t in ("acme", "globex")
    }
    assert built["named"]["acme"] == {
        "topic": "flow-requests.acme",
        "subscription": "flow-requests.acme.start",
    }
    assert built["none"] == {}


NAMED = "Every tenant of tenant_publishers must be named in tenants"
PUBLIC = "tenant_publishers must not contain allUsers or allAuthenticatedUsers"
# Each input Terraform must refuse, and the message that says why.
REFUSED = {
    # A tenant not named in tenants has no topic: its publishers would have nowhere to go.
    "unnamed_tenant": (
        {
            "tenants": {"tenants": {"acme": {}}},
            "tenant_publishers": {
                "globex": {"orders": "serviceAccount:o@p.iam.gserviceaccount.com"}
            },
        },
        NAMED,
    ),
    "no_tenants_at_all": (
        {"tenant_publishers": {"acme": {"orders": "serviceAccount:o@p.iam.gserviceaccount.com"}}},
        NAMED,
    ),
    "public": (
        {
            "tenants": {"tenants": {"acme": {}}},
            "tenant_publishers": {"acme": {"everyone": "allUsers"}},
        },
        PUBLIC,
    ),
    "signed_in_public": (
        {
            "tenants": {"tenants": {"acme": {}}},
            "tenant_publishers": {"acme": {"everyone": "allAuthenticatedUsers"}},
        },
        PUBLIC,
    ),
    "bad_tenant_name": (
        {"tenants": {"tenants": {"Acme": {}}}, "tenant_publishers": {"Acme": {}}},
        "tenant_publishers is keyed by tenant names",
    ),
}


@needs_terraform
@pytest.mark.parametrize("case", sorted(REFUSED))
def test_terraform_refuses_publishers_of_an_unnamed_tenant_or_the_public(
    tmp_path: Path, case: str
) -> None:
    inputs, says = REFUSED[case]
    output = " ".join(_terraform(tmp_path, {case: inputs}, "plan").split())
    assert "Error:" in output and says in output, output[-3000:]

"""A first apply on a fresh project converges: checked on the dependency graph of each root.

Derived from the HCL (tfgraph.py), not from a list of relayflow's resources:
- every resource is created after the google_project_service that enables the API it uses;
- every principal a resource grants to, or runs or signs as, comes from the resource that makes
  it exist (a service account or a service identity) or from an operator's input, never from a
  string spelled before anything creates it;
- whatever names a Cloud KMS key (a store of flow data encrypted with a customer-managed key) is
  created after every grant on that key: creating a store with a key its service agent may not
  use yet fails;
- whatever delivers traffic (a push subscription, a scheduler job) is created after its receiver
  can accept it: the receiving service, its invoker grants, every grant its identity holds, the
  grants on the identity the deliverer signs as, the Firestore database and the queues. The
  receiver is the service the deliverer's endpoint refers to; an endpoint that refers to none
  (a URL computed before the service exists) stands for every service its identity may invoke.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from tfconfig import root_dirs
from tfgraph import IDENTITY_TYPES, Graph, Node, Source

# The API each resource type calls, by type prefix (longest prefix wins).
API_BY_PREFIX = {
    "google_project_service": "serviceusage.googleapis.com",
    "google_project_iam_": "cloudresourcemanager.googleapis.com",
    "google_project": "cloudresourcemanager.googleapis.com",
    "google_service_account": "iam.googleapis.com",
    "google_cloud_run_v2_": "run.googleapis.com",
    "google_pubsub_": "pubsub.googleapis.com",
    "google_cloud_tasks_": "cloudtasks.googleapis.com",
    "google_cloud_scheduler_": "cloudscheduler.googleapis.com",
    "google_firestore_": "firestore.googleapis.com",
    "google_monitoring_": "monitoring.googleapis.com",
    "google_storage_": "storage.googleapis.com",
    "google_kms_": "cloudkms.googleapis.com",
    "google_artifact_registry_": "artifactregistry.googleapis.com",
    "google_cloudbuild_": "cloudbuild.googleapis.com",
}
# On before Terraform can do anything (the deploy walkthrough enables them with gcloud).
PREREQUISITE_APIS = {"serviceusage.googleapis.com", "cloudresourcemanager.googleapis.com"}
PRINCIPAL_ATTRIBUTES = {"member", "service_account", "service_account_email"}

ROOTS = root_dirs()
IDS = [p.name for p in ROOTS]


def api_of(node: Node) -> str | None:
    """The API a resource needs enabled; a service identity needs the service it stands for."""
    if node.type == "terraform_data":
        return None
    if node.type == "google_project_service_identity":
        return str(node.block.body["service"])
    matches = [p for p in API_BY_PREFIX if node.type.startswith(p)]
    assert matches, f"say which API {node.type} uses (API_BY_PREFIX)"
    return API_BY_PREFIX[max(matches, key=len)]


def enabled_by(graph: Graph, node: Node) -> set[str]:
    """The APIs a google_project_service resource enables (its literal for_each or service)."""
    spec = node.block.body.get("for_each", node.block.body.get("service"))
    return {s.value for s in graph.sources(spec, node.instance) if s.kind == "literal"}


def api_problems(graph: Graph) -> list[str]:
    enablers = list(graph.nodes_of("google_project_service"))
    problems = []
    for address, node in graph.nodes.items():
        api = api_of(node)
        if api is None or api in PREREQUISITE_APIS or node.type == "google_project_service":
            continue
        before = graph.after(address)
        if not any(e.address in before and api in enabled_by(graph, e) for e in enablers):
            problems.append(f"{address} may be created before {api} is enabled")
    return problems


def _principals(body: dict[str, object], where: str = "") -> list[tuple[str, str]]:
    """(path, attribute) of every principal-naming attribute in a body, nested blocks included."""
    found = []
    for key, value in body.items():
        if key in PRINCIPAL_ATTRIBUTES and isinstance(value, str):
            found.append((f"{where}{key}", key))
        elif isinstance(value, list):
            found += [
                p for v in value if isinstance(v, dict) for p in _principals(v, f"{where}{key}.")
            ]
    return found


def _nested_value(body: dict[str, object], path: str) -> str:
    value: object = body
    for part in path.split("."):
        value = value[part][0] if isinstance(value[part], list) else value[part]  # type: ignore[index]
    return str(value)


def principal_sources(graph: Graph, node: Node, path: str) -> set[Source]:
    if "." not in path:
        return graph.member_sources(node, path)
    return graph.sources(_nested_value(node.block.body, path), node.instance)


def principal_problems(graph: Graph) -> list[str]:
    problems = []
    for node in graph.nodes.values():
        for path, _ in _principals(node.block.body):
            problems += _judge_principal(graph, node, path)
    return problems


def _judge_principal(graph: Graph, node: Node, path: str) -> list[str]:
    sources = principal_sources(graph, node, path)
    where = f"{node.address}.{path}"
    problems = [
        f"{where}: {s.value!r} names a principal in a string, before anything makes it exist"
        for s in sources
        if s.kind == "literal" and ("gserviceaccount.com" in s.value or "@" in s.value)
    ]
    resources = {s.value for s in sources if s.kind == "resource"}
    problems += [
        f"{where}: built from {r}, which does not create the principal"
        for r in resources
        if graph.nodes[r].type not in IDENTITY_TYPES
    ]
    return problems


def _identity_of(graph: Graph, node: Node) -> str | None:
    """The identity a deliverer signs its OIDC token as, if it pushes or calls with one."""
    for path, attribute in _principals(node.block.body):
        if attribute == "service_account_email" and "oidc_token" in path:
            sources = principal_sources(graph, node, path)
            (identity,) = [s.value for s in sources if s.kind == "resource"]
            return identity
    return None


def _grants_naming(graph: Graph, identity: str, attribute: str) -> set[str]:
    return {
        n.address
        for n in graph.nodes.values()
        if n.type.endswith("_iam_member")
        and attribute in n.block.body
        and Source("resource", identity) in graph.member_sources(n, attribute)
    }


def _endpoint_of(node: Node) -> object:
    """The URL of the block that carries a deliverer's oidc_token (push_endpoint, uri)."""

    def find(body: dict[str, object]) -> object:
        if "oidc_token" in body:
            return body.get("push_endpoint", body.get("uri"))
        for value in body.values():
            for inner in value if isinstance(value, list) else []:
                found = find(inner) if isinstance(inner, dict) else None
                if found is not None:
                    return found
        return None

    return find(node.block.body)


# Arguments that name the Cloud KMS key a resource is encrypted with (cmek_config.kms_key_name,
# encryption.default_kms_key_name, default_encryption_configuration.kms_key_name, ...).
KEY_ATTRIBUTES = {"kms_key_name", "default_kms_key_name"}


def _key_expressions(body: dict[str, object]) -> list[object]:
    """Every value of a key-naming argument in a body, nested and dynamic blocks included (a
    dynamic block's for_each stands for the values its content takes)."""
    found: list[object] = []
    for key, value in body.items():
        if key in KEY_ATTRIBUTES:
            found.append(value)
        elif key == "dynamic" and isinstance(value, list):
            for dynamic in value:
                for inner in dynamic.values():
                    if isinstance(inner, dict) and _key_expressions(inner):
                        found += [inner.get("for_each", ""), *_key_expressions(inner)]
        elif isinstance(value, list):
            found += [e for v in value if isinstance(v, dict) for e in _key_expressions(v)]
    return found


def key_grant_problems(graph: Graph) -> list[str]:
    problems = []
    grants = list(graph.nodes_of("google_kms_crypto_key_iam_member"))
    for node in graph.nodes.values():
        expressions = _key_expressions(node.block.body)
        if not expressions:
            continue
        # The keys the value is made from, however indirectly (a grant's crypto_key_id, a
        # resource that hands the ids on).
        keys = {
            k
            for r in graph.refs(expressions, node.instance)
            for k in {r} | graph.after(r)
            if graph.nodes[k].type == "google_kms_crypto_key"
        }
        if not keys:
            problems.append(f"{node.address} names a key no google_kms_crypto_key here makes")
        on_keys = {
            g.address
            for g in grants
            if graph.refs(g.block.body["crypto_key_id"], g.instance) & keys
        }
        before = graph.after(node.address)
        problems += [
            f"{node.address} may be created before {g} exists" for g in sorted(on_keys - before)
        ]
    return problems


def readiness_problems(graph: Graph) -> list[str]:
    problems = []
    for node in graph.nodes.values():
        identity = _identity_of(graph, node)
        if identity is None:
            continue
        endpoint = graph.refs(_endpoint_of(node), node.instance)
        needed = _receiver_needs(graph, identity, endpoint)
        missing = needed - graph.after(node.address)
        problems += [f"{node.address} may deliver before {m} exists" for m in sorted(missing)]
    return problems


def _receiver_needs(graph: Graph, identity: str, endpoint: set[str]) -> set[str]:
    """What a service invoked as ``identity`` needs before it can accept a request; the service
    is the one ``endpoint`` (the resources the deliverer's URL refers to) names, if it names one
    the identity may invoke, else every service the identity may invoke."""
    may_invoke = {
        a
        for a in _grants_naming(graph, identity, "member")
        if graph.nodes[a].block.body.get("role") == "roles/run.invoker"
    }
    assert may_invoke, f"nothing may be invoked as {identity}"
    invokers = {a for a in may_invoke if _invoked(graph, a) & endpoint} or may_invoke
    needed = set(invokers)
    for address in invokers:
        receiver = graph.nodes[address].instance
        needed |= graph.resources_in(receiver)
        runtime = f"{receiver.prefix()}google_service_account.main"
        needed |= _grants_naming(graph, runtime, "member")
    # The deliverer's own identity must be usable (e.g. the Pub/Sub agent may mint its token).
    needed |= _grants_naming(graph, identity, "service_account_id")
    needed |= {
        n.address
        for n in graph.nodes.values()
        if n.type.startswith("google_firestore_") or n.type == "google_cloud_tasks_queue"
    }
    return needed


def _invoked(graph: Graph, grant: str) -> set[str]:
    """The resources an invoker grant names as its service (its ``name``)."""
    node = graph.nodes[grant]
    return graph.refs(node.block.body.get("name", ""), node.instance)


# --- The configuration ------------------------------------------------------------------------


@pytest.fixture(scope="module", params=ROOTS, ids=IDS)
def graph(request: pytest.FixtureRequest) -> Graph:
    return Graph(request.param)


def test_the_graph_has_no_cycle(graph: Graph) -> None:
    # Terraform refuses a cyclic configuration outright; depends_on through module inputs
    # (push_after) is where one would creep in.
    assert [a for a in graph.nodes if a in graph.after(a)] == []


def test_every_resource_type_has_a_known_api(graph: Graph) -> None:
    for node in graph.nodes.values():
        api_of(node)


def test_nothing_is_created_before_the_api_it_uses_is_enabled(graph: Graph) -> None:
    assert api_problems(graph) == []


def test_every_principal_exists_before_it_is_granted_or_used(graph: Graph) -> None:
    assert principal_problems(graph) == []


def test_deliveries_start_only_once_their_receivers_can_accept_them(graph: Graph) -> None:
    assert readiness_problems(graph) == []


def test_whatever_names_a_key_is_created_after_the_grants_on_it(graph: Graph) -> None:
    assert key_grant_problems(graph) == []


def test_the_environments_encrypt_their_stores_with_keys_they_grant_first() -> None:
    # The check above has something to check: each store of flow data names a key.
    for root in ROOTS:
        if root.parent.name != "envs":
            continue
        graph = Graph(root)
        named = {a for a, n in graph.nodes.items() if _key_expressions(n.block.body)}
        assert named == {
            "module.relayflow.module.firestore.google_firestore_database.main",
            "module.relayflow.module.messaging.google_pubsub_topic.main",
            "module.relayflow.module.messaging.google_pubsub_topic.tenant",
            "module.relayflow.module.offload.google_storage_bucket.main",
        }


def test_the_environments_have_their_push_subscriptions_and_a_schedule_to_check() -> None:
    for root in ROOTS:
        if root.parent.name != "envs":
            continue
        graph = Graph(root)
        deliverers = [n.address for n in graph.nodes.values() if _identity_of(graph, n)]
        assert sorted(deliverers) == [
            "module.relayflow.google_cloud_scheduler_job.schedules",
            "module.relayflow.google_cloud_scheduler_job.sweep",
            "module.relayflow.module.messaging.google_pubsub_subscription.signals",
            "module.relayflow.module.messaging.google_pubsub_subscription.start",
            # Each named tenant's start subscription (one resource, an instance per tenant).
            "module.relayflow.module.messaging.google_pubsub_subscription.tenant",
        ]


RECEIVERS = {
    # Each push names its receiver by its endpoint; the schedule's computed URL names none.
    "module.relayflow.module.messaging.google_pubsub_subscription.start": "start_flow",
    "module.relayflow.module.messaging.google_pubsub_subscription.tenant": "start_flow",
    "module.relayflow.module.messaging.google_pubsub_subscription.signals": "api",
    "module.relayflow.google_cloud_scheduler_job.sweep": None,
}


@pytest.mark.parametrize("deliverer", sorted(RECEIVERS))
def test_each_push_waits_for_the_service_it_delivers_to(deliverer: str) -> None:
    graph = Graph(ROOTS[0])
    node = graph.nodes[deliverer]
    endpoint = graph.refs(_endpoint_of(node), node.instance)
    services = {a for a in endpoint if graph.nodes[a].type == "google_cloud_run_v2_service"}
    receiver = RECEIVERS[deliverer]
    expected = {f"module.relayflow.module.{receiver}.google_cloud_run_v2_service.main"}
    assert services == (expected if receiver else set())
    before = graph.after(deliverer)
    for call in ("start_flow", "api", "worker"):
        grants = f"module.relayflow.module.{call}.google_cloud_run_v2_service_iam_member.invoker"
        assert (grants in before) == (call == receiver or (receiver is None and call == "worker"))


# --- The checks catch what they claim to (on a small configuration of their own) ---------------

BROKEN = {
    "main.tf": """
        locals {
          services = ["pubsub.googleapis.com", "run.googleapis.com", "iam.googleapis.com"]
          n        = data.google_project.main.number
        }
        data "google_project" "main" {}
        resource "google_project_service" "main" {
          for_each = toset(local.services)
          service  = each.value
        }
        resource "google_pubsub_topic" "requests" {
          name = "requests"
        }
        resource "google_pubsub_topic_iam_member" "agent" {
          topic      = google_pubsub_topic.requests.name
          role       = "roles/pubsub.publisher"
          member     = "serviceAccount:service-${local.n}@gcp-sa-pubsub.iam.gserviceaccount.com"
          depends_on = [google_project_service.main]
        }
        resource "google_service_account" "push" {
          account_id = "push"
          depends_on = [google_project_service.main]
        }
        module "svc" {
          source  = "./svc"
          invoker = "serviceAccount:${google_service_account.push.email}"
          depends_on = [google_project_service.main]
        }
        resource "google_pubsub_subscription" "start" {
          name  = "start"
          topic = google_pubsub_topic.requests.id
          push_config {
            push_endpoint = module.svc.uri
            oidc_token {
              service_account_email = google_service_account.push.email
            }
          }
          depends_on = [google_project_service.main]
        }
    """,
    "svc/main.tf": """
        variable "invoker" {
          type = string
        }
        resource "google_service_account" "main" {
          account_id = "svc"
        }
        resource "google_cloud_run_v2_service" "main" {
          name = "svc"
          template {
            service_account = google_service_account.main.email
          }
        }
        resource "google_cloud_run_v2_service_iam_member" "invoker" {
          name   = google_cloud_run_v2_service.main.name
          role   = "roles/run.invoker"
          member = var.invoker
        }
        output "uri" {
          value = google_cloud_run_v2_service.main.uri
        }
    """,
}


@pytest.fixture
def broken(tmp_path: Path) -> Graph:
    for name, text in BROKEN.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text), encoding="utf-8")
    return Graph(tmp_path)


def test_the_api_check_finds_a_resource_that_does_not_wait_for_its_api(broken: Graph) -> None:
    assert api_problems(broken) == [
        "google_pubsub_topic.requests may be created before pubsub.googleapis.com is enabled"
    ]


def test_the_principal_check_finds_a_service_agent_spelled_as_a_string(broken: Graph) -> None:
    problems = principal_problems(broken)
    assert len(problems) == 2
    assert all(p.startswith("google_pubsub_topic_iam_member.agent.member: ") for p in problems)
    assert any("names a principal in a string" in p for p in problems)
    assert any("built from data.google_project.main" in p for p in problems)


UNGRANTED_KEY = {
    "main.tf": """
        resource "google_project_service_identity" "pubsub" {
          service = "pubsub.googleapis.com"
        }
        resource "google_kms_crypto_key" "pubsub" {
          name     = "pubsub"
          key_ring = "ring"
        }
        resource "google_kms_crypto_key_iam_member" "agent" {
          crypto_key_id = google_kms_crypto_key.pubsub.id
          role          = "roles/cloudkms.cryptoKeyEncrypterDecrypter"
          member        = google_project_service_identity.pubsub.member
        }
        resource "google_pubsub_topic" "early" {
          name         = "early"
          kms_key_name = google_kms_crypto_key.pubsub.id
        }
        resource "google_pubsub_topic" "waits" {
          name         = "waits"
          kms_key_name = google_kms_crypto_key_iam_member.agent.crypto_key_id
        }
        resource "google_storage_bucket" "early" {
          name = "early"
          dynamic "encryption" {
            for_each = [google_kms_crypto_key.pubsub.id]
            content {
              default_kms_key_name = encryption.value
            }
          }
        }
    """,
}


def test_the_key_check_finds_a_store_that_may_be_created_before_its_agent_may_use_the_key(
    tmp_path: Path,
) -> None:
    for name, text in UNGRANTED_KEY.items():
        (tmp_path / name).write_text(textwrap.dedent(text), encoding="utf-8")
    grant = "google_kms_crypto_key_iam_member.agent"
    assert key_grant_problems(Graph(tmp_path)) == [
        f"google_pubsub_topic.early may be created before {grant} exists",
        f"google_storage_bucket.early may be created before {grant} exists",
    ]


def test_the_readiness_check_finds_a_push_that_may_start_before_its_receiver(broken: Graph) -> None:
    problems = readiness_problems(broken)
    grant = "module.svc.google_cloud_run_v2_service_iam_member.invoker"
    assert f"google_pubsub_subscription.start may deliver before {grant} exists" in problems
    assert not any("google_cloud_run_v2_service.main exists" in p for p in problems), (
        "the push endpoint references the service, so it already waits for it"
    )


TWO_RECEIVERS = {
    "main.tf": """
        resource "google_service_account" "push" {
          account_id = "push"
        }
        module "a" {
          source  = "./svc"
          name    = "a"
          invoker = "serviceAccount:${google_service_account.push.email}"
        }
        module "b" {
          source  = "./svc"
          name    = "b"
          invoker = "serviceAccount:${google_service_account.push.email}"
        }
        resource "google_pubsub_subscription" "to_a" {
          name = "to-a"
          push_config {
            push_endpoint = "${module.a.uri}/a"
            oidc_token {
              service_account_email = google_service_account.push.email
            }
          }
        }
    """,
    "svc/main.tf": """
        variable "name" {
          type = string
        }
        variable "invoker" {
          type = string
        }
        resource "google_service_account" "main" {
          account_id = var.name
        }
        resource "google_cloud_run_v2_service" "main" {
          name = var.name
          template {
            service_account = google_service_account.main.email
          }
        }
        resource "google_cloud_run_v2_service_iam_member" "invoker" {
          name   = google_cloud_run_v2_service.main.name
          role   = "roles/run.invoker"
          member = var.invoker
        }
        output "uri" {
          value = google_cloud_run_v2_service.main.uri
        }
    """,
}


def test_the_readiness_check_holds_a_push_to_the_service_its_endpoint_names(
    tmp_path: Path,
) -> None:
    # One identity may invoke a and b; the push to a is held to a's needs (and misses a's
    # grant), none of b's: the old check, one receiver per identity, would demand b's too.
    for name, text in TWO_RECEIVERS.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text), encoding="utf-8")
    assert readiness_problems(Graph(tmp_path)) == [
        "google_pubsub_subscription.to_a may deliver before "
        "module.a.google_cloud_run_v2_service_iam_member.invoker exists"
    ]

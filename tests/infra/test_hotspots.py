"""The hotspot guard: no collection written at the flow rate keeps a monotonically increasing
field (every datetime of its document's model) in an index without a shard, and the document
ids the flow rate writes are not in key order — the rules of relayflow.capacity.rules checked
against the Terraform's index configuration (infra/terraform, read as bench/capacity.py reads
it), so a later change cannot bring a hotspot back unseen.

Firestore limits a collection with a sequential indexed field to 500 writes/s
(https://docs.cloud.google.com/firestore/native/docs/solutions/shard-timestamp), and writes to
lexicographically close ids share a tablet
(https://docs.cloud.google.com/firestore/docs/best-practices#high_read_write_and_delete_rates_to_a_narrow_document_range).
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from relayflow.capacity import rules
from relayflow.capacity.terraform import Unresolvable, read_deployment
from relayflow.core.records import flow_key

try:  # the store's hash-prefixed ids (issue 20)
    from relayflow.gcp.store.keys import document_id
except ImportError:  # before them, a flow's document id is its key

    def document_id(key: str) -> str:
        return key


REPO = Path(__file__).resolve().parents[2]
ENVS = sorted(p.name for p in (REPO / "infra" / "terraform" / "envs").iterdir() if p.is_dir())
# Sequential ids, as callers choose them (order-000123, order-000124, …).
IDS = [f"order-{i:06d}" for i in range(1000)]


@pytest.mark.parametrize("env", ENVS)
def test_no_monotonic_field_is_indexed_without_a_shard(env: str) -> None:
    deployment = read_deployment(REPO, env)
    monotonic = rules.monotonic_fields(deployment.collections)

    findings = rules.index_findings(deployment.indexes, monotonic)

    assert not findings, "hotspots:\n" + "\n".join(str(f) for f in findings)


def lane_ids(keys: list[str]) -> list[str]:
    return [document_id(f"{k}.register_all.{lane}") for k in keys for lane in (0, 1)]


def flow_ids(keys: list[str]) -> list[str]:
    return [document_id(k) for k in keys]


@pytest.mark.parametrize("tenant", ["default", "acme"])
@pytest.mark.parametrize(("kind", "ids"), [("flows", flow_ids), ("lanes", lane_ids)])
def test_document_ids_of_sequential_flow_ids_are_not_in_key_order(
    tenant: str, kind: str, ids: Callable[[list[str]], list[str]]
) -> None:
    findings = rules.id_findings(kind, ids([flow_key(tenant, i) for i in IDS]))

    assert not findings, "\n".join(str(f) for f in findings)


def write_tree(root: Path, *, composite: str, unindexed: str, shards: str = "") -> Path:
    """A minimal repo: topology.json and the three modules and one env the reader needs."""
    (root / "relayflow").mkdir(parents=True)
    (root / "relayflow" / "topology.json").write_text(
        '{"queues": {"steps": {"name": "flow-steps", "max_dispatches_per_second": 200'
        + shards
        + '}}, "firestore": {"flows_collection": "flows"}}'
    )
    files = {
        "envs/prod/main.tf": """
            module "relayflow" {
              source        = "../../modules/relayflow"
              max_instances = var.max_instances
            }""",
        "envs/prod/variables.tf": """
            variable "max_instances" {
              default = { worker = 40 }
            }""",
        "modules/relayflow/main.tf": f"""
            locals {{
              unindexed_fields = {{ (local.topology.firestore.flows_collection) = [{unindexed}] }}
            }}
            module "firestore" {{
              source           = "../firestore"
              ttl_collections  = [local.topology.firestore.flows_collection]
              unindexed_fields = local.unindexed_fields
              composite_indexes = {{
                listing = {{
                  collection = local.topology.firestore.flows_collection
                  fields     = [{composite}]
                }}
              }}
            }}
            module "worker" {{
              source        = "../service"
              name          = "worker"
              max_instances = var.max_instances["worker"]
              cpu           = "2"
            }}""",
        "modules/relayflow/variables.tf": """
            variable "max_instances" {
              default = { worker = 10 }
            }""",
        "modules/firestore/variables.tf": """
            variable "ttl_field" {
              default = "expire_at"
            }""",
        "modules/service/variables.tf": """
            variable "max_instances" {
              default = 10
            }
            variable "cpu" {
              default = "1"
            }
            variable "max_concurrency" {
              default = 80
            }""",
    }
    for name, text in files.items():
        path = root / "infra" / "terraform" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def field(name: str) -> str:
    return f'{{ field_path = "{name}", order = "ASCENDING" }}'


def test_the_reader_finds_todays_hotspots_in_a_configuration(tmp_path: Path) -> None:
    repo = write_tree(
        tmp_path, composite=f"{field('status')}, {field('updated_at')}", unindexed='"history"'
    )

    deployment = read_deployment(repo)
    found = {
        (f.field, f.index)
        for f in rules.index_findings(deployment.indexes, {"flows": {"updated_at", "expire_at"}})
    }

    assert found == {("updated_at", "single-field"), ("updated_at", "listing")}
    assert deployment.indexes.exempt == {"flows": frozenset({"history", "expire_at"})}
    (worker,) = deployment.services
    assert (worker.max_instances, worker.cpu, worker.concurrency) == (40, 2.0, 80)
    assert deployment.queues[0].shards == 1 and deployment.firestore_shards is None


def test_the_reader_passes_a_sharded_configuration(tmp_path: Path) -> None:
    repo = write_tree(
        tmp_path,
        composite=f"{field('shard')}, {field('status')}, {field('updated_at')}",
        unindexed='"history", "updated_at"',
        shards=', "shards": 8',
    )

    deployment = read_deployment(repo)

    assert rules.index_findings(deployment.indexes, {"flows": {"updated_at"}}) == []
    assert deployment.queues[0].shards == 8


def test_an_expression_the_reader_cannot_evaluate_is_an_error(tmp_path: Path) -> None:
    repo = write_tree(tmp_path, composite=field("updated_at"), unindexed="local.elsewhere")

    with pytest.raises(Unresolvable, match="elsewhere"):
        read_deployment(repo)

"""Queue shards in Terraform: every shard of every kind is provisioned, granted and monitored,
named as relayflow names them, with the count the services are told; a shard is never
destroyed. The expansion itself is run by terraform (no provider needed) where it is installed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from relayflow.topology import load_topology, with_queue_shards
from tests.infra.tfconfig import ENVS, MODULES, TOPOLOGY_FILE, env_dirs, load
from tests.infra.tfprobe import needs_terraform, outputs, run, write_calls

RELAYFLOW = MODULES / "relayflow"


def test_each_environment_sets_the_count_it_passes_to_the_module() -> None:
    for env in env_dirs():
        config = load(env)
        assert config.modules["relayflow"].body["queue_shards"] == "${var.queue_shards}", env
        # Each environment's count is the capacity model's (tests/infra/test_sizing.py).
        default = config.variables["queue_shards"].body["default"]
        assert isinstance(default, int) and default >= 1, env
    relayflow = load(RELAYFLOW)
    assert relayflow.variables["queue_shards"].body["default"] is None
    assert relayflow.locals["queue_shards"] == (
        "${coalesce(var.queue_shards, local.topology.queues.steps.shards)}"
    )
    # The services route over exactly the shards Terraform made.
    assert "RELAYFLOW_QUEUE_SHARDS = tostring(local.queue_shards)" in (
        (RELAYFLOW / "main.tf").read_text(encoding="utf-8")
    )
    assert set(ENVS.iterdir()) == set(env_dirs())


def test_a_shard_queue_is_never_destroyed_and_shard_zero_keeps_its_address() -> None:
    queues = load(MODULES / "queues")
    shard = queues.resource("google_cloud_tasks_queue", "shard").body
    (lifecycle,) = shard["lifecycle"]
    assert lifecycle["prevent_destroy"] is True
    # Shard 0 stays google_cloud_tasks_queue.main[ROLE], as before queues had shards.
    assert queues.resource("google_cloud_tasks_queue", "main").body["for_each"] == "${local.first}"


def _text_block(text: str, start: str, end: str) -> str:
    begin = text.index(start)
    return text[begin : text.index(end, begin) + len(end)]


def _probe(root: Path) -> None:
    """A module of the relayflow module's queue_shards variable and queue locals, and the
    queues module's split into shard 0 and the others, on a copy of topology.json."""
    main = (RELAYFLOW / "main.tf").read_text(encoding="utf-8")
    variables = (RELAYFLOW / "variables.tf").read_text(encoding="utf-8")
    queues_main = (MODULES / "queues" / "main.tf").read_text(encoding="utf-8")
    probe = root / "probe"
    probe.mkdir()
    shutil.copy(TOPOLOGY_FILE, probe / "topology.json")
    (probe / "main.tf").write_text(
        _text_block(variables, 'variable "queue_shards" {', "\n}\n")
        + "\nlocals {\n"
        + '  topology = jsondecode(file("${path.module}/topology.json"))\n'
        + re.search(r"  queue_shards = coalesce\(.*\)\n", main).group(0)  # type: ignore[union-attr]
        + _text_block(main, "  queues = merge([", "  ]...)\n")
        + "}\n"
        + _text_block(queues_main, "locals {", "\n}\n").replace("var.queues", "local.queues")
        + '\noutput "names" { value = { for k, q in local.queues : k => q.name } }\n'
        + 'output "first" { value = keys(local.first) }\n'
        + 'output "more" { value = keys(local.more) }\n'
        + 'output "shards" { value = local.queue_shards }\n',
        encoding="utf-8",
    )


def _terraform(
    root: Path, cases: dict[str, Any], *command: str
) -> subprocess.CompletedProcess[str]:
    _probe(root)
    write_calls(root, {name: {"queue_shards": shards} for name, shards in cases.items()})
    return run(root, *command)


@needs_terraform
def test_terraform_makes_every_shard_relayflow_routes_to(tmp_path: Path) -> None:
    done = _terraform(tmp_path, {"default": None, "one": 1, "four": 4}, "apply", "-auto-approve")
    assert done.returncode == 0, done.stdout + done.stderr
    made = outputs(tmp_path)
    for case, shards in (("default", None), ("one", 1), ("four", 4)):
        built = made[case]
        expected = with_queue_shards(load_topology(), shards).queues
        # The same names as the local stack provisions and the runtime routes to.
        assert sorted(built["names"].values()) == sorted(q.name for q in expected.provisioned())
        assert built["shards"] == expected.shards
        # Shard 0 keeps each role's key (its state address); shards i >= 1 are role-i.
        roles = {"steps", "polls", "steps_high", "polls_high"}
        assert set(built["first"]) == roles
        assert set(built["more"]) == {f"{r}-{i}" for r in roles for i in range(1, expected.shards)}
        assert built["names"]["steps"] == "flow-steps"
    assert made["four"]["names"]["polls_high-3"] == "flow-polls-high-3"


@needs_terraform
@pytest.mark.parametrize("shards", [0, 1.5, 251, -2])
def test_terraform_refuses_a_bad_count(tmp_path: Path, shards: float) -> None:
    done = _terraform(tmp_path, {"bad": shards}, "plan")
    assert done.returncode != 0
    assert "queue_shards is a whole number in 1..250" in done.stdout + done.stderr

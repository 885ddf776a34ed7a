"""Each environment's Cloud Run sizes and queue shards are the capacity model's, at the target
infra/terraform/sizing.json gives it: a hand edit, or a new profile without `make sizing`,
fails here."""

from __future__ import annotations

from pathlib import Path

import hcl2

from relayflow.capacity.sizing import SizingFile, regenerate, sizing_path

REPO = Path(__file__).resolve().parents[2]
ENVS = sorted(p.name for p in (REPO / "infra" / "terraform" / "envs").iterdir() if p.is_dir())


def test_every_environment_has_a_target_and_prod_the_issue_s() -> None:
    targets = SizingFile.read(REPO).targets

    assert sorted(targets) == ENVS
    assert targets["prod"] >= 10_000


def test_every_sizing_file_is_what_the_model_gives() -> None:
    assert regenerate(REPO, check=True) == []


def test_each_sized_variable_is_declared_once_per_environment() -> None:
    for env in ENVS:
        declared: list[str] = []
        for tf in sorted((REPO / "infra" / "terraform" / "envs" / env).glob("*.tf")):
            with tf.open(encoding="utf-8") as handle:
                for block in hcl2.load(handle).get("variable", []):
                    declared += [k.strip('"') for k in block if not k.startswith("__")]
        for name in ("max_instances", "concurrency", "queue_shards"):
            assert declared.count(name) == 1, (env, name)
        assert sizing_path(REPO, env).exists()

"""docs/deploy.md says what the repository does: its paths exist, its triggers and outputs are
the ones Terraform creates; the README's deploy section points to it."""

from __future__ import annotations

import re

from tfconfig import BOOTSTRAP, MODULES, REPO, env_dirs, load

DEPLOY = REPO / "docs" / "deploy.md"


def _doc() -> str:
    return DEPLOY.read_text(encoding="utf-8")


def test_the_readme_deploy_section_links_the_walkthrough_and_the_runbook() -> None:
    # The text this file once carried for the README now lives there (ca23957).
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Deploying\n", 1)[1].split("\n## ", 1)[0]
    for link in ("(docs/deploy.md)", "(docs/runbook.md)"):
        assert link in section
    assert not _doc().split("\n## ", 2)[1].startswith("For the README")


def test_every_repository_path_it_names_exists() -> None:
    named = set(
        re.findall(
            r"`((?:infra|deploy|docs|tests)/[\w./<>-]+|Dockerfile|cloudbuild\.yaml|requirements\.lock)`",
            _doc(),
        )
    )
    assert named
    for path in named:
        concrete = path.replace("<env>", "dev").rstrip("/")
        assert (REPO / concrete).exists(), path


def test_the_triggers_it_runs_are_the_ones_the_bootstrap_creates() -> None:
    triggers = {
        f"relayflow-{name}"
        for per_env in load(MODULES / "bootstrap").locals["triggers"].values()
        for name in per_env
    }
    assert set(re.findall(r"triggers run (relayflow-\w+)", _doc())) == triggers


def test_the_outputs_it_reads_exist() -> None:
    outputs = set(load(BOOTSTRAP).outputs)
    for path in env_dirs():
        outputs |= set(load(path).outputs)
    read = set(re.findall(r"terraform output -raw (\w+)", _doc()))
    assert read and read <= outputs, read - outputs

"""docs/deploy.md says what the repository does: its paths exist, its triggers and outputs are
the ones Terraform creates; the README's deploy section points to it."""

from __future__ import annotations

import json
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


def test_the_callback_section_matches_the_routes_the_topic_and_the_variables() -> None:
    doc = _doc()
    section = doc.split("### 10. External systems that complete callbacks", 1)[1].split("\n## ")[0]
    routes = (REPO / "relayflow" / "web" / "callbacks.py").read_text(encoding="utf-8")
    for route in ('@app.post("/callbacks")', '@app.post("/signals")'):
        assert route in routes
    assert 'CALLBACK_TOKEN_HEADER = "X-Relayflow-Callback-Token"' in (
        REPO / "relayflow" / "web" / "guard.py"
    ).read_text(encoding="utf-8")
    # The token goes in the body or a header, never in the URL (the old route answers 410).
    stale = (
        "docs/deploy.md §10 must say `POST /callbacks` with the token in X-Relayflow-Callback-Token"
    )
    assert "`POST /callbacks`" in section and "`POST /signals`" in section, stale
    assert "X-Relayflow-Callback-Token" in section, stale
    in_url = re.findall(r"/callbacks/(?:\{token\}|<token>|<callback token>|\$\{?\w)", section)
    assert not in_url, f"docs/deploy.md §10 still puts the token in the URL: {in_url}"
    topology = json.loads((REPO / "relayflow" / "topology.json").read_text(encoding="utf-8"))
    assert f"`{topology['topics']['signals']}`" in section
    assert f"`{topology['subscriptions']['signals']['name']}`" in section
    # The message shapes the api's /signals reads (relayflow.web.callbacks.completion_of).
    assert '{"token": "...", "output": {...}}' in section
    assert '{"token": "...", "error": {"code": "...", "message": "..."}}' in section
    for path in env_dirs():
        variables = set(load(path).variables)
        named = set(re.findall(r"`(\w+_(?:completers|publishers|ingress))\b", section))
        assert named == {"api_completers", "signal_publishers", "api_ingress"}
        assert named <= variables, named - variables

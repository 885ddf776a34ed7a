"""The image and the Cloud Build pipeline: what runs in each service, and the order of the build."""

from __future__ import annotations

import re

import pytest
from tfconfig import MODULES, REPO, load

RELAYFLOW = MODULES / "relayflow"
COMPONENTS = {"start_flow": "start-flow", "worker": "worker", "poller": "poller", "api": "api"}


def _read(relative: str) -> str:
    return (REPO / relative).read_text(encoding="utf-8")


def _step(cloudbuild: str, step_id: str) -> str:
    """The text of one step of cloudbuild.yaml (up to the next step)."""
    match = re.search(rf"^  - id: {step_id}\n(.*?)(?=^  - id: |\Z)", cloudbuild, re.M | re.S)
    assert match, f"no step {step_id}"
    return match.group(1)


def _wait_for(cloudbuild: str, step_id: str) -> set[str]:
    match = re.search(r"^    waitFor: \[(.*)\]$", _step(cloudbuild, step_id), re.M)
    assert match, f"step {step_id} has no waitFor"
    return {s.strip() for s in match.group(1).split(",")}


@pytest.mark.parametrize(("call", "component"), sorted(COMPONENTS.items()))
def test_terraform_selects_each_component_of_the_one_image(call: str, component: str) -> None:
    env = load(RELAYFLOW).modules[call].body["env"]
    selected = re.search(r'COMPONENT\s*=\s*"([\w-]+)"', env)
    assert selected and selected.group(1) == component


def test_the_entrypoint_starts_every_component_on_port() -> None:
    script = _read("deploy/entrypoint.sh")
    assert re.search(r"^\s*start-flow\)", script, re.M)
    assert re.search(r"^\s*worker \| poller \| api\)", script, re.M)
    assert "--target start_flow" in script and "--signature-type cloudevent" in script
    assert (
        '"0.0.0.0:${PORT}"' in script and 'gunicorn_app "services.${COMPONENT}.main:app"' in script
    )
    assert re.search(r"^def start_flow\(", _read("functions/start_flow/main.py"), re.M)
    for service in ("worker", "poller", "api"):
        assert re.search(r"^app = ", _read(f"services/{service}/main.py"), re.M)


def test_the_image_is_python_3_11_slim_and_runs_as_a_non_root_user() -> None:
    dockerfile = _read("Dockerfile")
    assert re.search(r"^FROM python:3\.11-slim$", dockerfile, re.M)
    users = re.findall(r"^USER (\S+)$", dockerfile, re.M)
    assert users and users[-1] not in {"root", "0"}
    assert "COPY deploy/entrypoint.sh" in dockerfile
    assert "!deploy/entrypoint.sh" in _read(".dockerignore")


def test_the_build_tests_before_it_pushes_and_pushes_before_it_applies() -> None:
    cloudbuild = _read("cloudbuild.yaml")
    assert "exec .ci/run" in _read("deploy/ci-test.sh")
    assert "deploy/ci-test.sh" in _step(cloudbuild, "test")
    assert {"test", "checkov", "build"} <= _wait_for(cloudbuild, "push")
    assert "push" in _wait_for(cloudbuild, "terraform-apply")


def test_the_build_applies_only_a_known_environment_with_the_pushed_digest() -> None:
    cloudbuild = _read("cloudbuild.yaml")
    assert "dev|staging|prod) ;;" in _step(cloudbuild, "check-env")
    apply = _step(cloudbuild, "terraform-apply")
    assert "dir: infra/terraform/envs/${_ENV}" in apply
    assert '-var="image=$$(cat /workspace/image.txt)"' in apply
    assert "RepoDigests" in _step(cloudbuild, "push")

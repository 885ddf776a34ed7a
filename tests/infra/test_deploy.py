"""The image: one for every component, built from locked dependencies on a base pinned by digest,
usable as the template of a team's image; and what runs in each service."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from tfconfig import MODULES, REPO, load

RELAYFLOW = MODULES / "relayflow"
COMPONENTS = {"start_flow": "start-flow", "worker": "worker", "poller": "poller", "api": "api"}
DEFAULT_APP = "relayflow.apps.registration:build_registry"


def _read(relative: str) -> str:
    return (REPO / relative).read_text(encoding="utf-8")


def _instructions(name: str) -> list[str]:
    """Arguments of every Dockerfile instruction called ``name`` (continuations joined)."""
    text = re.sub(r"\\\n\s*", " ", _read("Dockerfile"))
    return re.findall(rf"^{name} (.+)$", text, re.M)


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
        '"0.0.0.0:${PORT}"' in script
        and 'gunicorn_app "relayflow.services.${COMPONENT}.main:app"' in script
    )
    assert re.search(r"^def start_flow\(", _read("relayflow/functions/start_flow/main.py"), re.M)
    for service in ("worker", "poller", "api"):
        assert re.search(r"^app = ", _read(f"relayflow/services/{service}/main.py"), re.M)


def test_the_entrypoint_finds_the_start_function_where_it_is_installed() -> None:
    script = _read("deploy/entrypoint.sh")
    assert "/app/" not in script, "a team's image has relayflow in site-packages, not /app"
    function = re.search(r"^module_file\(\) \{\n.*?^\}", script, re.M | re.S)
    assert function
    found = subprocess.run(
        ["sh", "-c", f"{function.group(0)}\nmodule_file relayflow.functions.start_flow.main"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
    )
    assert Path(found.stdout.strip()) == REPO / "relayflow" / "functions" / "start_flow" / "main.py"


def test_gunicorn_has_a_timeout() -> None:
    script = _read("deploy/entrypoint.sh")
    assert '--timeout "${GUNICORN_TIMEOUT_S}"' in script
    default = int(re.search(r"GUNICORN_TIMEOUT_S:=(\d+)", script).group(1))  # type: ignore[union-attr]
    assert 3600 < default < 3700, "just past Cloud Run's longest request timeout"


def test_the_base_image_is_python_3_11_slim_pinned_by_digest() -> None:
    (arg,) = [a for a in _instructions("ARG") if a.startswith("PYTHON_IMAGE=")]
    assert re.fullmatch(r"PYTHON_IMAGE=python:3\.11-slim(-bookworm)?@sha256:[0-9a-f]{64}", arg)
    froms = _instructions("FROM")
    assert froms and all(f.startswith("${PYTHON_IMAGE}") for f in froms)


def test_the_image_installs_only_hashed_dependencies_then_first_party_code_offline() -> None:
    runs = " ".join(_instructions("RUN"))
    assert "pip install --require-hashes --no-deps -r requirements.lock" in runs
    assert "pip install --no-deps --no-index --no-build-isolation ${INSTALL}" in runs
    assert "pip check" in runs
    assert not re.search(r"pip install (?!--require-hashes|--no-deps --no-index)", runs)


def test_the_image_is_a_template_for_a_teams_repository() -> None:
    args = dict(a.split("=", 1) for a in _instructions("ARG") if "=" in a)
    assert args["INSTALL"] == "."
    assert args["APP"] == DEFAULT_APP
    env = " ".join(_instructions("ENV"))
    assert "RELAYFLOW_APP=${APP}" in env
    cloudbuild = _read("cloudbuild.yaml")
    assert (
        "--build-arg=INSTALL=${_INSTALL}" in cloudbuild and "--build-arg=APP=${_APP}" in cloudbuild
    )
    assert load(RELAYFLOW).variables["app"].body["default"] == DEFAULT_APP


def test_the_image_runs_as_a_non_root_user() -> None:
    users = _instructions("USER")
    assert users and users[-1] not in {"root", "0"}
    assert "deploy/entrypoint.sh /usr/local/bin/relayflow-entrypoint" in _instructions("COPY")
    ignored = _read(".dockerignore")
    for needed in ("!requirements.lock", "!deploy/entrypoint.sh", "!relayflow/"):
        assert needed in ignored.split()


def _locked() -> dict[str, str]:
    pins = re.findall(r"^([A-Za-z0-9._-]+)==([^\s\\]+)", _read("requirements.lock"), re.M)
    return {re.sub(r"[-_.]+", "-", name).lower(): version for name, version in pins}


def test_every_dependency_is_locked_with_hashes() -> None:
    lock = _read("requirements.lock")
    entries = re.split(r"\n(?=[A-Za-z0-9])", lock.split("\n\n", 1)[-1].strip())
    for entry in entries:
        if entry.startswith("#") or not entry.strip():
            continue
        assert "--hash=sha256:" in entry, entry.splitlines()[0]
    project = tomllib.loads(_read("pyproject.toml"))
    names = [re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0] for d in project["project"]["dependencies"]]
    locked = _locked()
    missing = [n for n in names if re.sub(r"[-_.]+", "-", n).lower() not in locked]
    assert missing == [], "regenerate requirements.lock (docs/deploy.md)"
    build_backend = project["build-system"]["requires"][0].split(">")[0]
    assert build_backend in locked, "the image builds from source with the locked backend"

"""The built wheel, installed into a fresh virtualenv, brings only ``relayflow`` import names.

A team's environment may have its own ``services``, ``functions`` or ``emulators`` package: the
wheel must not put a package of those names (or any other generic one) beside theirs. The
services' and the start function's entry points, and the local emulators, live under
``relayflow`` and import from the installed wheel, not from this source tree.

The venv is ``conftest.installed``'s: the wheel alone, its dependencies borrowed. The last test
is a team's plain ``pip install relayflow-*.whl`` into a fresh venv with pip, every dependency
resolved from an index: the wheelhouse ``make install`` downloads from the lock file
(``$RELAYFLOW_WHEELHOUSE``, else ``.venv/wheelhouse``), used as the index.
"""

from __future__ import annotations

import json
import os
import subprocess
import venv
from pathlib import Path

import pytest

from .conftest import REPO, outside_env, run

# What a relayflow install may add beside ``relayflow``: its own metadata, its CLI script.
LISTING = """
import importlib.metadata as m, json
files = m.distribution("relayflow").files or []
print(json.dumps(sorted({f.parts[0] for f in files if not f.parts[0].startswith("..")})))
"""
IMPORTS = """
import importlib.util, json, relayflow
names = ["services", "functions", "emulators", "relayflow.services.api.main",
         "relayflow.functions.start_flow.main", "relayflow.emulators.cloud_tasks"]
from relayflow.schemas import SCHEMAS
print(json.dumps({"relayflow": relayflow.__file__,
                  "schemas": sorted(p.committed()["$id"] for p in SCHEMAS.values()),
                  **{n: importlib.util.find_spec(n) is not None for n in names}}))
"""


def test_the_wheel_installs_only_relayflow_import_names(installed: Path) -> None:
    top_level = json.loads(run(installed, LISTING))
    assert top_level == ["relayflow", "relayflow-0.1.0.dist-info"]


def test_the_entry_points_and_emulators_import_from_the_wheel_alone(installed: Path) -> None:
    found = json.loads(run(installed, IMPORTS))
    assert Path(found.pop("relayflow")).is_relative_to(installed.parents[1]), "not the wheel's"
    assert found.pop("schemas") == [  # package data: what the api serves
        "urn:relayflow:schema:result-event:v1",
        "urn:relayflow:schema:signal-message:v1",
        "urn:relayflow:schema:start-message:v1",
    ]
    assert found == {
        "services": False,
        "functions": False,
        "emulators": False,
        "relayflow.services.api.main": True,
        "relayflow.functions.start_flow.main": True,
        "relayflow.emulators.cloud_tasks": True,
    }


CLEAN = """
import json, relayflow, google.cloud.firestore, pydantic
from relayflow import Client, Flow, Registry
print(json.dumps([relayflow.__file__, google.cloud.firestore.__file__, pydantic.__file__]))
"""


def wheelhouse() -> Path:
    return Path(os.environ.get("RELAYFLOW_WHEELHOUSE") or REPO / ".venv" / "wheelhouse")


def test_pip_install_of_the_wheel_resolves_every_dependency_from_an_index(
    wheel: Path, tmp_path: Path
) -> None:
    index = wheelhouse()
    if not any(index.glob("*.whl")):
        if os.environ.get("CI"):
            pytest.fail(f"no wheelhouse at {index}: `make install` downloads it in CI")
        pytest.skip(f"no wheelhouse at {index} (`make wheelhouse` downloads one)")
    venv.create(tmp_path / "venv", with_pip=True)
    python = tmp_path / "venv" / "bin" / "python"
    pip = [str(python), "-m", "pip", "--disable-pip-version-check", "-q", "--isolated"]
    install = [*pip, "install", "--no-index", "--find-links", str(index), str(wheel)]
    done = subprocess.run(install, env=outside_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    checked = subprocess.run([*pip, "check"], env=outside_env(), capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout

    # everything, relayflow and its dependencies alike, is the fresh venv's own
    found = [Path(p) for p in json.loads(run(python, CLEAN))]
    assert all(p.is_relative_to(tmp_path / "venv") for p in found), found
    cli = subprocess.run(
        [str(python.with_name("relayflow")), "--help"],
        cwd="/",
        env=outside_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 0 and "local" in cli.stdout, cli.stderr

"""The built wheel, installed into a fresh virtualenv, brings only ``relayflow`` import names.

A team's environment may have its own ``services``, ``functions`` or ``emulators`` package: the
wheel must not put a package of those names (or any other generic one) beside theirs. The
services' and the start function's entry points, and the local emulators, live under
``relayflow`` and import from the installed wheel, not from this source tree.

The fresh venv is made without pip and the wheel installed into it by this venv's pip
(``--python``); its third-party dependencies come from this venv through a ``.pth`` line, which
adds that site-packages to the path without running its own ``.pth`` files — so the editable
install of the source tree stays out, and ``relayflow`` resolves to the wheel alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
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
print(json.dumps({"relayflow": relayflow.__file__,
                  **{n: importlib.util.find_spec(n) is not None for n in names}}))
"""


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel built from this tree installed; its python."""
    root = tmp_path_factory.mktemp("wheel")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    build = [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(root), str(REPO)]
    subprocess.run(build, check=True, timeout=240)
    (wheel,) = root.glob("relayflow-*.whl")
    venv.create(root / "venv", with_pip=False)
    python = root / "venv" / "bin" / "python"
    install = [*pip, "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)]
    subprocess.run(install, check=True, timeout=240)
    site = run(python, "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip()
    (Path(site) / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def run(python: Path, code: str) -> str:
    done = subprocess.run(
        [str(python), "-c", code], cwd="/", capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_wheel_installs_only_relayflow_import_names(fresh: Path) -> None:
    top_level = json.loads(run(fresh, LISTING))
    assert top_level == ["relayflow", "relayflow-0.1.0.dist-info"]


def test_the_entry_points_and_emulators_import_from_the_wheel_alone(fresh: Path) -> None:
    found = json.loads(run(fresh, IMPORTS))
    assert Path(found.pop("relayflow")).is_relative_to(fresh.parents[1]), "not the wheel's"
    assert found == {
        "services": False,
        "functions": False,
        "emulators": False,
        "relayflow.services.api.main": True,
        "relayflow.functions.start_flow.main": True,
        "relayflow.emulators.cloud_tasks": True,
    }

"""The wheel built from this tree, installed into a fresh virtualenv: what a team gets.

The venv is made without pip and the wheel installed into it by this venv's pip (``--python``);
its third-party dependencies come from this venv through a ``.pth`` line, which adds that
site-packages to the path without running its own ``.pth`` files — so the editable install of
the source tree stays out, and ``relayflow`` resolves to the wheel alone. A team's
``pip install relayflow-*.whl``, which resolves the dependencies from an index, is
``test_wheel``'s: against a wheelhouse that ``make`` downloads at install time (tests may not
download).
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from this tree."""
    root = tmp_path_factory.mktemp("wheel")
    build = [*PIP, "wheel", "--no-deps", "--no-build-isolation", "-w", str(root), str(REPO)]
    subprocess.run(build, check=True, timeout=240, env=outside_env())
    (built,) = root.glob("relayflow-*.whl")
    return built


@pytest.fixture(scope="session")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a fresh venv with the wheel built from this tree installed."""
    root = tmp_path_factory.mktemp("installed")
    venv.create(root / "venv", with_pip=False)
    python = root / "venv" / "bin" / "python"
    install = [*PIP, "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)]
    # Not this tree's PYTHONPATH: pip would find the source tree's relayflow already there.
    subprocess.run(install, check=True, timeout=240, env=outside_env())
    site = run(python, "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip()
    (Path(site) / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def outside_env() -> dict[str, str]:
    """This process's environment without what would point a child at the source tree (or at
    the session's emulators)."""
    drop = ("PYTHONPATH", "RELAYFLOW_APP")
    return {
        k: v for k, v in os.environ.items() if k not in drop and not k.endswith("_EMULATOR_HOST")
    }


def run(python: Path, code: str) -> str:
    """What ``code`` prints, run by ``python`` outside the source tree."""
    done = subprocess.run(
        [str(python), "-c", code],
        cwd="/",
        env=outside_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout

"""A team's own project, outside this repository, run by relayflow as a user would run it.

In a temporary directory: a package ``myflows`` with a Registry of one flow, nothing
installed, and its tests — both files exactly as the README's "Write your own flows" gives
them. The tests run with pytest in milliseconds, on relayflow.testing alone.
``relayflow local up --app myflows.flows:registry``, run by the relayflow of the wheel built from
this tree and installed into a fresh virtualenv (``conftest.installed``), starts the local
stack with the package;
the flow is published with ``relayflow publish``, followed with ``relayflow watch`` to
SUCCEEDED through Pub/Sub, Cloud Tasks and Firestore (the emulators), and the stack stopped.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import outside_env

pytestmark = pytest.mark.e2e

BASE_PORT = int(os.environ.get("RELAYFLOW_TEST_BASE_PORT", "18120")) + 500

README = Path(__file__).resolve().parents[2] / "README.md"
# A service of the team's starting a flow and awaiting its result with the wheel's client.
CLIENT = """
from relayflow import Client
with Client() as client:
    print(client.start("hello", {"name": "client"}, flow_id="hello-2").result(timeout=120))
"""


def readme_file(name: str) -> str:
    """The code block the README's "Write your own flows" gives for the file ``name``: the
    walk-through is what this test runs, so the two cannot drift apart."""
    section = README.read_text(encoding="utf-8").split("## Write your own flows", 1)[1]
    section = section.split("\n## ", 1)[0]
    after = section.split(f"`{name}`", 1)[1]
    block = after.split("```python\n", 1)[1].split("```", 1)[0]
    return block


def relayflow(project: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """``relayflow ARGS`` as the team's shell runs it: the wheel's CLI, in their project."""
    done = subprocess.run(
        [str(installed_python(project).with_name("relayflow")), *args],
        cwd=project,
        env={**outside_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, f"relayflow {' '.join(args)}: {done.stdout}\n{done.stderr}"
    return done.stdout


def read_env_file(path: Path) -> dict[str, str]:
    """The ``export NAME=value`` lines of the stack's env file, as a user's shell sees them."""
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        if name != "PATH":
            env[name] = shlex.split(value)[0]
    return env


def installed_python(project: Path) -> Path:
    return Path((project / ".python").read_text())


@pytest.fixture
def files(tmp_path: Path, installed: Path) -> Path:
    """The team's project as the README's walk-through makes it (``.python`` says which
    interpreter has relayflow installed: the wheel's venv)."""
    root = tmp_path / "my-team-project"
    (root / "myflows").mkdir(parents=True)
    (root / "myflows" / "__init__.py").write_text("")
    (root / "myflows" / "flows.py").write_text(readme_file("myflows/flows.py"))
    (root / "tests").mkdir()
    (root / "tests" / "test_flows.py").write_text(readme_file("tests/test_flows.py"))
    (root / ".python").write_text(str(installed))
    return root


@pytest.fixture
def project(files: Path) -> Iterator[Path]:
    """The project, with its local stack stopped at the end."""
    yield files
    relayflow(files, "local", "down", "--state-dir", str(files / ".relayflow"))


def test_a_team_project_runs_its_flow_through_the_local_stack(project: Path) -> None:
    state = str(project / ".relayflow")
    up = relayflow(
        project, "local", "up", "--app", "myflows.flows:registry",
        "--base-port", str(BASE_PORT), "--state-dir", state,
    )  # fmt: skip
    assert "app myflows.flows:registry: hello v1" in up
    env = read_env_file(project / ".relayflow" / "env")
    assert env["RELAYFLOW_APP"] == "myflows.flows:registry"

    published = relayflow(
        project, "publish", "hello", "--input", '{"name": "team"}', "--flow-id", "hello-1",
        env=env,
    )  # fmt: skip
    assert "flow id hello-1" in published

    watched = relayflow(project, "watch", "hello-1", "--timeout-s", "120", env=env)
    assert "status    SUCCEEDED" in watched
    assert "warm_up" in watched and "poll 2" in watched
    status = relayflow(project, "status", "hello-1", "--json", env=env)
    assert '"message": "hello team!"' in status

    # and the service that starts flows: relayflow.Client from the same wheel, its result
    # awaited on flow-results
    started = subprocess.run(
        [str(installed_python(project)), "-c", CLIENT],
        cwd=project,
        env={**outside_env(), **env},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert started.returncode == 0, started.stderr
    assert started.stdout.strip() == "{'message': 'hello client!'}"


def test_the_readme_tests_of_a_team_project_pass_on_the_harness_alone(files: Path) -> None:
    pytest_ = [str(installed_python(files)), "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*pytest_, "tests/test_flows.py"],
        cwd=files,
        env={**outside_env(), "PYTHONPATH": str(files)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout

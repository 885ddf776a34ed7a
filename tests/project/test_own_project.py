"""A team's own project, outside this repository, run by relayflow as a user would run it.

In a temporary directory: a package ``myflows`` with a Registry of one flow, nothing
installed. ``relayflow local up --app myflows.flows:registry`` starts the local stack with it;
the flow is published with ``relayflow publish``, followed with ``relayflow watch`` to
SUCCEEDED through Pub/Sub, Cloud Tasks and Firestore (the emulators), and the stack stopped.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

RELAYFLOW = str(Path(sys.executable).parent / "relayflow")
BASE_PORT = int(os.environ.get("RELAYFLOW_TEST_BASE_PORT", "18120")) + 500

FLOWS = '''
"""A team's flows: greet, wait until warmed up (polled), finish."""

from relayflow import ActionStep, Flow, NotReady, PollPolicy, PollStep, Registry, StepContext


def greet(ctx: StepContext) -> dict[str, str]:
    return {"greeting": f"hello {ctx.input['name']}"}


def warmed_up(ctx: StepContext) -> dict[str, int]:
    if ctx.poll < 2:
        raise NotReady(f"warming up ({ctx.poll})")
    return {"polls": ctx.poll + 1}


def finish(ctx: StepContext) -> dict[str, str]:
    return {"message": ctx.outputs["greet"]["greeting"] + "!"}


registry = Registry([
    Flow(
        name="hello",
        steps=(
            ActionStep("greet", greet),
            PollStep("warm_up", warmed_up, policy=PollPolicy(initial_s=0.2, max_interval_s=0.5)),
            ActionStep("finish", finish),
        ),
    )
])
'''


def relayflow(project: Path, *args: str, env: dict[str, str] | None = None) -> str:
    environ = {k: v for k, v in os.environ.items() if not k.endswith("_EMULATOR_HOST")}
    environ.pop("RELAYFLOW_APP", None)
    done = subprocess.run(
        [RELAYFLOW, *args],
        cwd=project,
        env={**environ, **(env or {})},
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


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "my-team-project"
    (root / "myflows").mkdir(parents=True)
    (root / "myflows" / "__init__.py").write_text("")
    (root / "myflows" / "flows.py").write_text(textwrap.dedent(FLOWS))
    yield root
    relayflow(root, "local", "down", "--state-dir", str(root / ".relayflow"))


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

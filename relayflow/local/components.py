"""What the local stack runs: one entry per component with its command line and health probe."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

from relayflow.local.clock import CLOCK_FILE
from relayflow.local.environment import OFFLOAD_BUCKET, PROJECT_ID
from relayflow.local.health import Probe
from relayflow.local.names import ALL, EMULATORS, FAKES, GROUPS, SERVICES
from relayflow.local.ports import HOST, Ports

__all__ = ["ALL", "EMULATORS", "FAKES", "GROUPS", "SERVICES", "Component", "Phase", "Toolchain"]


class Phase(IntEnum):
    """Start order: backing processes, then provisioning, then relayflow's own processes."""

    BACKING = 0
    SERVICE = 1


@dataclass(frozen=True)
class Component:
    name: str
    phase: Phase
    ports: tuple[int, ...]
    argv: tuple[str, ...]
    health_url: str
    probe: Probe
    data_dir: Path | None = None  # created before start: the emulators do not create it


@dataclass(frozen=True)
class Toolchain:
    """Where the executables live: the running venv's, so a stack never mixes interpreters."""

    python: str
    bin_dir: Path
    gcloud: str = "gcloud"

    @classmethod
    def current(cls) -> Toolchain:
        # Not resolved: a venv's python is a symlink, and its scripts sit next to the link.
        return cls(python=sys.executable, bin_dir=Path(sys.executable).parent)

    def module(self, name: str) -> tuple[str, str, str]:
        """Run a tool as ``python -m``: its console script may sit in another bin directory
        than this python (an environment that borrows its dependencies), its module cannot."""
        return (self.python, "-m", name)


def resolve(names: Iterable[str]) -> tuple[str, ...]:
    """Component names (or group names) in start order; unknown names raise ValueError."""
    wanted: set[str] = set()
    for name in names:
        if name not in GROUPS and name not in ALL:
            raise ValueError(f"unknown component {name!r}; choose from {', '.join(ALL)}")
        wanted.update(GROUPS.get(name, (name,)))
    return tuple(name for name in ALL if name in wanted)


def build(
    ports: Ports,
    state_dir: Path,
    tools: Toolchain,
    *,
    duplicate_rate: float = 0.0,
    sweep_interval_s: float = 60.0,
) -> dict[str, Component]:
    """Every component of the stack on ``ports``, keyed by name.

    ``duplicate_rate`` makes the Cloud Tasks emulator deliver that share of tasks twice, as
    the real service occasionally does, so a stack can prove its handlers idempotent.
    ``sweep_interval_s`` is how often the sweeper runs (Cloud Scheduler's every minute).
    """
    components = (
        _pubsub(ports, state_dir, tools),
        _firestore(ports, tools),
        _cloud_tasks(ports, state_dir, tools, duplicate_rate),
        _storage(ports, tools),
        _fake("client_api", ports.client_api, tools),
        _fake("orders_api", ports.orders_api, tools),
        _start_function(ports, tools),
        _gunicorn("worker", ports.worker, "relayflow.services.worker.main:app", tools),
        _gunicorn("poller", ports.poller, "relayflow.services.poller.main:app", tools),
        _gunicorn("api", ports.api, "relayflow.services.api.main:app", tools),
        _sweeper(tools, sweep_interval_s, state_dir),
    )
    return {component.name: component for component in components}


def _url(port: int, path: str = "/") -> str:
    return f"http://{HOST}:{port}{path}"


def _pubsub(ports: Ports, state_dir: Path, tools: Toolchain) -> Component:
    # Its own data dir: two stacks (a demo and a test run) must not share gcloud's default one.
    data_dir = state_dir / "pubsub"
    argv = (
        tools.gcloud,
        "beta",
        "emulators",
        "pubsub",
        "start",
        f"--host-port={HOST}:{ports.pubsub}",
        f"--project={PROJECT_ID}",
        f"--data-dir={data_dir}",
        "--quiet",
    )
    url = _url(ports.pubsub)
    return Component("pubsub", Phase.BACKING, (ports.pubsub,), argv, url, Probe.OK_BODY, data_dir)


def _firestore(ports: Ports, tools: Toolchain) -> Component:
    argv = (
        tools.gcloud,
        "emulators",
        "firestore",
        "start",
        f"--host-port={HOST}:{ports.firestore}",
        "--quiet",
    )
    url = _url(ports.firestore)
    return Component("firestore", Phase.BACKING, (ports.firestore,), argv, url, Probe.OK_BODY)


def _cloud_tasks(
    ports: Ports, state_dir: Path, tools: Toolchain, duplicate_rate: float
) -> Component:
    data_dir = state_dir / "cloud_tasks"
    argv = (
        tools.python,
        "-m",
        "relayflow.emulators.cloud_tasks",
        "--host",
        HOST,
        "--port",
        str(ports.cloud_tasks_grpc),
        "--rest-port",
        str(ports.cloud_tasks_rest),
        "--data-dir",
        str(data_dir),
        "--duplicate-rate",
        str(duplicate_rate),
    )
    return Component(
        "cloud_tasks",
        Phase.BACKING,
        (ports.cloud_tasks_grpc, ports.cloud_tasks_rest),
        argv,
        _url(ports.cloud_tasks_rest, "/healthz"),
        Probe.HTTP_2XX,
        data_dir,
    )


def _storage(ports: Ports, tools: Toolchain) -> Component:
    """gcp-storage-emulator (from PyPI), in memory, its bucket made as it starts: the payload
    offload bucket, reached by the official client through STORAGE_EMULATOR_HOST. It keeps no
    lifecycle rules: objects stay until the stack stops (the cloud's bucket deletes them)."""
    argv = (
        *tools.module("gcp_storage_emulator"),
        "start",
        "--host",
        HOST,
        "--port",
        str(ports.storage),
        "--in-memory",
        "--quiet",
        "--default-bucket",
        OFFLOAD_BUCKET,
    )
    url = _url(ports.storage)
    return Component("storage", Phase.BACKING, (ports.storage,), argv, url, Probe.HTTP_2XX)


def _fake(name: str, port: int, tools: Toolchain) -> Component:
    """A fake external dependency (``emulators/<name>``), with a /healthz route."""
    argv = (tools.python, "-m", f"relayflow.emulators.{name}", "--host", HOST, "--port", str(port))
    url = _url(port, "/healthz")
    return Component(name, Phase.BACKING, (port,), argv, url, Probe.HTTP_2XX)


def _sweeper(tools: Toolchain, interval_s: float, state_dir: Path) -> Component:
    # It runs the schedules' tick too, on a clock a test moves by writing the clock file.
    clock = str(state_dir / CLOCK_FILE)
    argv = (
        tools.python,
        "-m",
        "relayflow.local.sweeper",
        "--interval-s",
        f"{interval_s:g}",
        "--clock-file",
        clock,
    )
    return Component("sweeper", Phase.SERVICE, (), argv, "", Probe.ALIVE)


def _start_function(ports: Ports, tools: Toolchain) -> Component:
    port = ports.start_function
    argv = (
        *tools.module("functions_framework"),
        "--target",
        "start_flow",
        "--source",
        "relayflow/functions/start_flow/main.py",
        "--signature-type",
        "cloudevent",
        "--host",
        HOST,
        "--port",
        str(port),
    )
    return Component("start_function", Phase.SERVICE, (port,), argv, _url(port), Probe.ANY_HTTP)


def _gunicorn(name: str, port: int, app: str, tools: Toolchain) -> Component:
    argv = (
        *tools.module("gunicorn"),
        "--bind",
        f"{HOST}:{port}",
        "--workers",
        "1",
        "--threads",
        "16",
        "--timeout",
        "120",
        *_gunicorn_no_control_socket(),
        app,
    )
    return Component(name, Phase.SERVICE, (port,), argv, _url(port, "/healthz"), Probe.HTTP_2XX)


def _gunicorn_no_control_socket() -> tuple[str, ...]:
    """``--no-control-socket`` where gunicorn has one (newer releases).

    Otherwise every gunicorn of every stack on the machine shares ~/.gunicorn/gunicorn.ctl.
    """
    from gunicorn.config import KNOWN_SETTINGS  # here: gunicorn is slow to import

    flags = {flag for setting in KNOWN_SETTINGS for flag in setting.cli or ()}
    return ("--no-control-socket",) if "--no-control-socket" in flags else ()

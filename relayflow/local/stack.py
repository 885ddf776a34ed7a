"""The local stack: start, provision, health-check and stop the emulators and services.

Usable from the CLI (``relayflow local up|down|status``) and from tests, which run an isolated
stack (another base port, a tmp state dir, a subset of components).
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from google.api_core.exceptions import GoogleAPICallError
from pydantic import ValidationError

from relayflow.core.queue_shards import MAX_QUEUE_SHARDS
from relayflow.gcp.sealer import write_keyset
from relayflow.local import processes, statefile
from relayflow.local.clients import wipe_firestore
from relayflow.local.components import ALL, Component, Phase, Toolchain, build, resolve
from relayflow.local.environment import (
    DEFAULT_STATE_DIR,
    PROJECT_ID,
    child_env,
    gcloud_env,
    relayflow_env,
    write_env_file,
)
from relayflow.local.health import is_healthy
from relayflow.local.polling import poll_until
from relayflow.local.ports import HOST, Ports
from relayflow.local.provision import provision_pubsub, provision_queues
from relayflow.local.statefile import ProcessRecord, StackState
from relayflow.topology import Topology, load_topology, with_queue_shards

# Cloud Scheduler calls the sweep every minute in the cloud; the local sweeper does the same.
DEFAULT_SWEEP_INTERVAL_S = 60.0
# The gcloud emulators start a JVM: allow for a slow, busy machine.
HEALTH_TIMEOUT_S = 120.0
_LOG_TAIL_LINES = 15


class StackError(Exception):
    """Raised when the local stack cannot start: a busy port, a crash, or a health timeout."""


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    ports: tuple[int, ...]
    pid: int
    alive: bool
    healthy: bool
    log: str


@dataclass(frozen=True)
class UpResult:
    started: bool  # False: a stack recorded in this state dir was already running
    state: StackState
    cleaned_stale: bool = False
    restarted: tuple[str, ...] = ()  # components of a running stack that were dead, restarted


class Stack:
    """One local stack, described by its ports, state dir and components."""

    def __init__(
        self,
        *,
        ports: Ports | None = None,
        state_dir: Path = DEFAULT_STATE_DIR,
        components: Iterable[str] = ALL,
        repo_root: Path | None = None,
        tools: Toolchain | None = None,
        base_env: Mapping[str, str] | None = None,
        health_timeout_s: float = HEALTH_TIMEOUT_S,
        duplicate_rate: float = 0.0,
        app: str | None = None,
        app_path: Path | None = None,
        sweep_interval_s: float = DEFAULT_SWEEP_INTERVAL_S,
        progress: Callable[[str], None] | None = None,
        queue_shards: int | None = None,
        queue_rate: float | None = None,
    ) -> None:
        if not 0.0 <= duplicate_rate <= 1.0:
            raise ValueError(f"duplicate_rate must be in [0, 1], got {duplicate_rate}")
        if sweep_interval_s < 0:
            raise ValueError(
                f"sweep_interval_s must be >= 0 (0: no sweeper), got {sweep_interval_s}"
            )
        # Queues of each kind (None: topology.json's), and a max_dispatches_per_second for every
        # queue instead of the topology's (None: the topology's; a scaled-down bench sets it).
        self.queue_shards = queue_shards
        self.queue_rate = queue_rate
        self.topology()  # a bad count or rate fails here, before anything starts
        self.ports = ports or Ports()
        # Absolute: components run from the repo root, not from the caller's directory.
        self.state_dir = Path(state_dir).absolute()
        # No sweeper when its interval is 0 (tests that sweep by hand want no competition).
        self.names = tuple(n for n in resolve(components) if n != "sweeper" or sweep_interval_s > 0)
        self.repo_root = repo_root or Path(__file__).resolve().parents[2]
        self.tools = tools or Toolchain.current()
        self.health_timeout_s = health_timeout_s
        # The flows the services run (RELAYFLOW_APP), importable from ``app_path``.
        self.app = app
        self.app_path = app_path.absolute() if app_path else None
        self._base_env = dict(os.environ if base_env is None else base_env)
        all_components = build(
            self.ports,
            self.state_dir,
            self.tools,
            duplicate_rate=duplicate_rate,
            sweep_interval_s=sweep_interval_s or DEFAULT_SWEEP_INTERVAL_S,
        )
        self._components = [all_components[name] for name in self.names]
        self._state = self._fresh_state()
        self._popens: dict[str, subprocess.Popen[bytes]] = {}
        # Told each step of a start as it happens (the CLI prints it: `up` waits a while).
        self._progress = progress or (lambda line: None)

    @property
    def state_file(self) -> Path:
        return self.state_dir / "state.json"

    @property
    def env_file(self) -> Path:
        return self.state_dir / "env"

    @property
    def keyset_file(self) -> Path:
        """The stack's cleartext keyset of flows' sensitive fields (``up`` makes it once)."""
        return self.state_dir / "sensitive-keyset.json"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    def log_path(self, name: str) -> Path:
        return self.logs_dir / f"{name}.log"

    def env(self) -> dict[str, str]:
        """What a client of this stack needs (emulator hosts, project, service URLs, the
        queue shards)."""
        return relayflow_env(self.ports, self.app, self.queue_shards, self.keyset_file)

    def topology(self) -> Topology:
        """The topology as this stack provisions and runs it: its queue shards and rate."""
        topology = load_topology()
        try:
            topology = with_queue_shards(topology, self.queue_shards)
        except ValidationError:
            raise ValueError(
                f"queue shards must be a whole number in 1..{MAX_QUEUE_SHARDS}, "
                f"not {self.queue_shards}"
            ) from None
        if self.queue_rate is None:
            return topology
        try:
            queues = topology.queues.with_rate(self.queue_rate)
        except ValidationError:
            raise ValueError(
                f"queue_rate must be in (0, 500] dispatches per second, not {self.queue_rate}"
            ) from None
        return topology.model_copy(update={"queues": queues})

    def _fresh_state(self) -> StackState:
        return StackState(
            base_port=self.ports.base, queue_shards=self.queue_shards, queue_rate=self.queue_rate
        )

    def shell_env(self) -> dict[str, str]:
        """``env()`` plus the variables that point the gcloud CLI at the emulators."""
        return {**self.env(), **gcloud_env(self.ports)}

    def wipe_firestore(self) -> None:
        """Delete every document in the Firestore emulator (it has no TTL and no Admin API)."""
        wipe_firestore(f"{HOST}:{self.ports.firestore}", PROJECT_ID)

    def running(self) -> StackState | None:
        """The recorded stack if any of its processes is still alive, else None."""
        state = statefile.load(self.state_file)
        if state is None or not any(_owned(record) for record in state.processes):
            return None
        return state

    def up(self) -> UpResult:
        """Start every component, provision, write the env file. On a stack that is already
        running, restart only what is dead or unhealthy and leave the rest."""
        running = self.running()
        if running is not None:
            return self._heal(running)
        cleaned_stale = self._clean_stale()
        self._check_ports_free()
        try:
            self._start_phase(Phase.BACKING)
            self._provision()
            self._start_phase(Phase.SERVICE)
        except BaseException:
            # Ctrl-C and crashes included: never leave half a stack running.
            self.down()
            raise
        write_env_file(self.env_file, self.shell_env(), path_prepend=self.tools.bin_dir)
        return UpResult(started=True, state=self._state, cleaned_stale=cleaned_stale)

    def _heal(self, state: StackState) -> UpResult:
        """Restart the components of a running stack that died (or stopped answering)."""
        self._state = state
        # Its queues stay as they were provisioned: a restarted service must route as the
        # others do, whatever this `up` was asked for.
        if (self.queue_shards, self.queue_rate) != (state.queue_shards, state.queue_rate):
            self._progress(
                f"the running stack keeps its queues (shards {state.queue_shards or 1}); "
                "`relayflow local down` first to change them"
            )
        self.queue_shards, self.queue_rate = state.queue_shards, state.queue_rate
        records = {record.name: record for record in state.processes}
        dead = [
            c
            for c in self._components
            if c.name not in records or not _status(records[c.name]).healthy
        ]
        for component in dead:
            if component.name in records and _owned(records[component.name]):
                processes.stop_groups([records[component.name].pid], reap=self._reap)
            self._state = self._state.without(component.name)
        try:
            for phase in (Phase.BACKING, Phase.SERVICE):
                started = [c for c in dead if c.phase is phase]
                for component in started:
                    self._start(component, fresh=False)
                self._wait_healthy(started)
                if phase is Phase.BACKING and started:
                    self._provision()  # idempotent: what exists already is left as it is
        finally:
            statefile.save(self.state_file, self._state)
        return UpResult(started=False, state=self._state, restarted=tuple(c.name for c in dead))

    def down(self) -> list[str]:
        """Stop exactly the recorded processes (by process group); the names that were running."""
        state = statefile.load(self.state_file) or self._state
        records = [record for record in state.processes if _owned(record)]
        survivors = processes.stop_groups([r.pid for r in records], reap=self._reap)
        statefile.remove(self.state_file)
        self.env_file.unlink(missing_ok=True)
        self._popens.clear()
        self._state = self._fresh_state()
        if survivors:
            raise StackError(f"process groups {survivors} survived SIGKILL")
        return [record.name for record in records]

    def status(self) -> list[ComponentStatus]:
        """One row per recorded component; empty when no stack is recorded."""
        state = statefile.load(self.state_file)
        return [_status(record) for record in state.processes] if state else []

    def _clean_stale(self) -> bool:
        if not self.state_file.exists():
            return False
        statefile.remove(self.state_file)
        self.env_file.unlink(missing_ok=True)
        return True

    def _check_ports_free(self) -> None:
        for component in self._components:
            for port in component.ports:
                if not _port_free(port):
                    raise StackError(
                        f"port {port} for {component.name} is already in use: another stack "
                        f"or program listens there; stop it or choose another base port"
                    )

    def _start_phase(self, phase: Phase) -> None:
        started = [c for c in self._components if c.phase is phase]
        for component in started:
            self._start(component)
        self._wait_healthy(started)

    def _start(self, component: Component, *, fresh: bool = True) -> None:
        log = self.log_path(component.name)
        if component.data_dir is not None and fresh:
            # Every `up` starts empty, as the in-memory Firestore emulator does: Cloud Tasks
            # must not bring back tasks for flows that Firestore has forgotten. (A restart of
            # a dead component keeps its data: the rest of the stack still has its flows.)
            shutil.rmtree(component.data_dir, ignore_errors=True)
        if component.data_dir is not None:
            component.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            popen = processes.spawn(
                component.argv, env=self._child_env(), cwd=self.repo_root, log_path=log
            )
        except OSError as error:
            msg = f"cannot start {component.name} ({component.argv[0]}): {error}"
            raise StackError(msg) from error
        self._popens[component.name] = popen
        record = ProcessRecord(
            name=component.name,
            pid=popen.pid,
            start_ticks=processes.start_ticks(popen.pid),
            ports=component.ports,
            health_url=component.health_url,
            probe=component.probe,
            log=str(log),
        )
        # Saved after every start, so `down` finds everything even if `up` dies midway.
        self._state = self._state.with_process(record)
        statefile.save(self.state_file, self._state)

    def _child_env(self) -> dict[str, str]:
        return child_env(
            self._base_env,
            self.ports,
            app=self.app,
            app_path=self.app_path,
            queue_shards=self.queue_shards,
            keyset=self.keyset_file,
        )

    def _wait_healthy(self, components: Sequence[Component]) -> None:
        pending = {component.name: component for component in components}

        def all_healthy() -> bool:
            for name, component in list(pending.items()):
                self._fail_if_exited(component)
                if is_healthy(component.health_url, component.probe):
                    del pending[name]
                    self._progress(f"{name} is healthy")
            return not pending

        if not poll_until(all_healthy, timeout_s=self.health_timeout_s, interval_s=0.2):
            raise StackError("\n".join(self._timeout_message(c) for c in pending.values()))

    def _fail_if_exited(self, component: Component) -> None:
        code = self._popens[component.name].poll()
        if code is not None:
            log = self.log_path(component.name)
            raise StackError(
                f"{component.name} exited with code {code} before it became healthy; "
                f"see {log}\n{_tail(log)}"
            )

    def _timeout_message(self, component: Component) -> str:
        log = self.log_path(component.name)
        return (
            f"{component.name} did not become healthy at {component.health_url} within "
            f"{self.health_timeout_s:g}s; see {log}\n{_tail(log)}"
        )

    def _provision(self) -> None:
        self._progress("provisioning topics, subscriptions and queues")
        topology = self.topology()
        try:
            if "pubsub" in self.names:
                provision_pubsub(self.ports, topology, self._tenants())
            if "cloud_tasks" in self.names:
                provision_queues(self.ports, topology)
        except GoogleAPICallError as error:
            raise StackError(f"provisioning the emulators failed: {error}") from error
        # The key the services seal flows' sensitive fields with (made once, then kept).
        write_keyset(self.keyset_file)

    def _tenants(self) -> list[str]:
        """The tenants named in the stack's RELAYFLOW_TENANTS: each gets its own start topic."""
        from relayflow.core.tenants import Tenants

        return sorted(Tenants.parse(self._base_env.get("RELAYFLOW_TENANTS", "")).tenants)

    def _reap(self) -> None:
        for popen in self._popens.values():
            popen.poll()


def _owned(record: ProcessRecord) -> bool:
    return processes.owns_group(record.pid, record.start_ticks)


def _status(record: ProcessRecord) -> ComponentStatus:
    alive = _owned(record)
    return ComponentStatus(
        name=record.name,
        ports=record.ports,
        pid=record.pid,
        alive=alive,
        healthy=alive and is_healthy(record.health_url, record.probe),
        log=record.log,
    )


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # SO_REUSEADDR: a socket in TIME_WAIT from the previous run does not count as "in use".
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                return False
            raise
    return True


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(f"    {line}" for line in lines[-_LOG_TAIL_LINES:])

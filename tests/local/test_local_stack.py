"""The stack's lifecycle against real processes: up, status, second up, down, and failures."""

from __future__ import annotations

import io
import os
import socket
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from relayflow.local import commands, processes, statefile
from relayflow.local.components import Toolchain
from relayflow.local.health import Probe
from relayflow.local.polling import poll_until
from relayflow.local.ports import Ports
from relayflow.local.stack import Stack, StackError
from relayflow.local.statefile import ProcessRecord, StackState

# Port blocks beside the session fixtures' and the e2e stack's (see tests/conftest.py).
LIFECYCLE_OFFSET = 300
FAILURE_OFFSET = 400


@pytest.fixture
def failure_ports(test_base_port: int) -> Ports:
    return Ports(test_base_port + FAILURE_OFFSET)


@pytest.fixture
def failure_stack(tmp_path: Path, failure_ports: Ports) -> Iterator[Stack]:
    """A one-component stack (the fake client API: quick, no JVM) that is always torn down."""
    stack = Stack(ports=failure_ports, state_dir=tmp_path, components=["client_api"])
    yield stack
    stack.down()


def _cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return commands.main(["local", *argv], out=out), out.getvalue()


@pytest.mark.e2e
def test_up_status_second_up_down(tmp_path: Path, test_base_port: int) -> None:
    base_port = test_base_port + LIFECYCLE_OFFSET
    flags = ("--state-dir", str(tmp_path), "--base-port", str(base_port))
    environ_before = dict(os.environ)
    try:
        code, out = _cli("up", *flags, "--sweep-interval-s", "1")
        assert code == 0, out
        assert "started" in out

        code, table = _cli("status", *flags)
        rows = table.splitlines()[1:]
        assert code == 0, table
        assert [row.split()[0] for row in rows] == [
            "pubsub", "firestore", "cloud_tasks", "storage", "client_api", "orders_api",
            "start_function", "worker", "poller", "api", "sweeper",
        ]  # fmt: skip
        assert all(row.split()[-1] == "yes" for row in rows)

        # the sweeper runs on its schedule, as Cloud Scheduler does in the cloud
        sweeper_log = tmp_path / "logs" / "sweeper.log"
        assert poll_until(lambda: '"swept"' in sweeper_log.read_text(), timeout_s=30)

        code, again = _cli("up", *flags)
        assert code == 0
        assert "already running" in again
        assert str(tmp_path) in again

        # a service dies: `up` restarts it and leaves the rest as they are
        before = statefile.load(tmp_path / "state.json")
        assert before is not None
        pids = {record.name: record.pid for record in before.processes}
        processes.stop_groups([pids["worker"]], reap=lambda: None)
        code, healed = _cli("up", *flags)
        assert code == 0, healed
        assert "restarted what was dead: worker" in healed
        after = statefile.load(tmp_path / "state.json")
        assert after is not None
        new_pids = {record.name: record.pid for record in after.processes}
        assert new_pids["worker"] != pids["worker"]
        assert {k: v for k, v in new_pids.items() if k != "worker"} == {
            k: v for k, v in pids.items() if k != "worker"
        }
        code, table = _cli("status", *flags)
        assert code == 0 and all(row.split()[-1] == "yes" for row in table.splitlines()[1:])
    finally:
        state = statefile.load(tmp_path / "state.json")
        code, stopped = _cli("down", *flags)

    assert code == 0
    assert state is not None
    assert "stopped: pubsub" in stopped
    assert not any(processes.group_alive(record.pid) for record in state.processes)
    assert not (tmp_path / "state.json").exists()
    assert (tmp_path / "logs" / "worker.log").exists()
    assert dict(os.environ) == environ_before


def test_up_writes_state_env_file_and_logs(failure_stack: Stack) -> None:
    result = failure_stack.up()

    assert result.started
    [record] = result.state.processes
    assert record.name == "client_api"
    assert processes.owns_group(record.pid, record.start_ticks)
    env_file = failure_stack.env_file.read_text(encoding="utf-8")
    assert (
        f"export RELAYFLOW_CLIENT_API_URL=http://127.0.0.1:{failure_stack.ports.client_api}"
        in env_file
    )
    assert "export CLOUDSDK_AUTH_DISABLE_CREDENTIALS=true" in env_file
    assert failure_stack.log_path("client_api").exists()

    assert failure_stack.down() == ["client_api"]
    assert not failure_stack.env_file.exists()
    assert not processes.group_alive(record.pid)


def test_stale_state_is_cleaned(failure_stack: Stack) -> None:
    dead = subprocess.Popen(["true"], start_new_session=True)
    dead.wait()
    record = ProcessRecord(
        name="client_api", pid=dead.pid, start_ticks=None, ports=(1,),
        health_url="http://127.0.0.1:1/", probe=Probe.HTTP_2XX, log="/dev/null",
    )  # fmt: skip
    statefile.save(failure_stack.state_file, StackState(base_port=1).with_process(record))

    assert failure_stack.running() is None
    result = failure_stack.up()

    assert result.started
    assert result.cleaned_stale
    assert [r.pid for r in result.state.processes] != [dead.pid]


def test_a_busy_port_is_named(failure_stack: Stack) -> None:
    with socket.socket() as squatter:
        # The tests before this one served on the port: a connection of theirs may still be in
        # TIME_WAIT, which only a socket that reuses the address may bind over (as the stack's
        # own check does). Listening, it holds the port all the same.
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", failure_stack.ports.client_api))
        squatter.listen()

        with pytest.raises(
            StackError, match=rf"port {failure_stack.ports.client_api} for client_api"
        ):
            failure_stack.up()

    assert not failure_stack.state_file.exists()


def test_early_exit_names_the_component_and_its_log(tmp_path: Path, failure_ports: Ports) -> None:
    stack = Stack(
        ports=failure_ports,
        state_dir=tmp_path,
        components=["client_api"],
        tools=Toolchain(
            python=_script(tmp_path, "echo 'boom: bad flag' >&2; exit 3"), bin_dir=tmp_path
        ),
    )

    with pytest.raises(StackError) as caught:
        stack.up()

    message = str(caught.value)
    assert "client_api exited with code 3" in message
    assert str(tmp_path / "logs" / "client_api.log") in message
    assert "boom: bad flag" in message
    assert not stack.state_file.exists()


def test_health_timeout_names_the_component_and_stops_it(
    tmp_path: Path, failure_ports: Ports
) -> None:
    pid_file = tmp_path / "pid"
    stack = Stack(
        ports=failure_ports,
        state_dir=tmp_path,
        components=["client_api"],
        tools=Toolchain(
            python=_script(tmp_path, f"echo $$ > {pid_file}; exec sleep 60"), bin_dir=tmp_path
        ),
        health_timeout_s=0.5,
    )

    with pytest.raises(StackError, match=r"client_api did not become healthy .* within 0\.5s"):
        stack.up()

    pid = int(pid_file.read_text(encoding="utf-8"))
    assert not processes.group_alive(pid)


def test_stop_groups_escalates_to_sigkill_for_the_whole_group(tmp_path: Path) -> None:
    # A leader and a child that both ignore SIGTERM, like a stuck JVM under a wrapper.
    popen = subprocess.Popen(
        ["bash", "-c", "trap '' TERM; sleep 60 & sleep 60 & wait"], start_new_session=True
    )
    assert poll_until(lambda: _children(popen.pid) >= 2, timeout_s=10)

    survivors = processes.stop_groups(
        [popen.pid], reap=popen.poll, term_grace_s=0.3, kill_grace_s=5
    )

    assert survivors == []
    assert popen.returncode is not None
    assert not processes.group_alive(popen.pid)


def _children(pgid: int) -> int:
    out = subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True, text=True).stdout
    return len(out.split())


def _script(directory: Path, body: str) -> str:
    """An executable standing in for ``python``: it ignores its arguments and runs ``body``."""
    path = directory / "fake-python"
    path.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)

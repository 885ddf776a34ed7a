"""The local stack's pure parts: components, environment, env file, polling, state file, CLI."""

from __future__ import annotations

import argparse
import io
import subprocess
from pathlib import Path

import pytest

from relayflow.local import commands, statefile
from relayflow.local.components import ALL, EMULATORS, Phase, Toolchain, build, resolve
from relayflow.local.environment import child_env, gcloud_env, relayflow_env, write_env_file
from relayflow.local.health import Probe
from relayflow.local.polling import poll_until
from relayflow.local.ports import Ports
from relayflow.local.stack import ComponentStatus
from relayflow.local.statefile import ProcessRecord, StackState

TOOLS = Toolchain(python="/venv/bin/python", bin_dir=Path("/venv/bin"))


def test_resolve_expands_groups_in_start_order() -> None:
    assert resolve(["cloud_tasks", "pubsub"]) == ("pubsub", "cloud_tasks")
    assert resolve(["emulators"]) == EMULATORS
    assert resolve(["all"]) == ALL
    assert resolve(["emulators", "client_api"]) == (*EMULATORS, "client_api")


def test_a_duplicate_rate_reaches_the_cloud_tasks_emulator(tmp_path: Path) -> None:
    argv = build(Ports(9000), tmp_path, TOOLS, duplicate_rate=0.25)["cloud_tasks"].argv
    assert argv[-2:] == ("--duplicate-rate", "0.25")


def test_resolve_refuses_unknown_names() -> None:
    with pytest.raises(ValueError, match="unknown component 'redis'"):
        resolve(["redis"])


def test_command_lines_follow_the_contract(tmp_path: Path) -> None:
    components = build(Ports(9000), tmp_path, TOOLS)

    assert components["pubsub"].argv[:5] == ("gcloud", "beta", "emulators", "pubsub", "start")
    assert "--host-port=127.0.0.1:9001" in components["pubsub"].argv
    assert "--project=relayflow-local" in components["pubsub"].argv
    assert "--host-port=127.0.0.1:9002" in components["firestore"].argv
    assert components["cloud_tasks"].argv == (
        "/venv/bin/python", "-m", "relayflow.emulators.cloud_tasks", "--host", "127.0.0.1",
        "--port", "9003", "--rest-port", "9004", "--data-dir", str(tmp_path / "cloud_tasks"),
        "--duplicate-rate", "0.0",
    )  # fmt: skip
    assert components["client_api"].argv[-2:] == ("--port", "9005")
    assert components["start_function"].argv == (
        "/venv/bin/python", "-m", "functions_framework", "--target", "start_flow",
        "--source", "relayflow/functions/start_flow/main.py", "--signature-type", "cloudevent",
        "--host", "127.0.0.1", "--port", "9006",
    )  # fmt: skip
    worker = components["worker"].argv
    assert worker[:11] == (
        "/venv/bin/python", "-m", "gunicorn", "--bind", "127.0.0.1:9007", "--workers", "1",
        "--threads", "16", "--timeout", "120",
    )  # fmt: skip
    assert worker[-1] == "relayflow.services.worker.main:app"
    assert components["poller"].argv[-1] == "relayflow.services.poller.main:app"
    assert components["api"].argv[-1] == "relayflow.services.api.main:app"


def test_health_probes_and_phases(tmp_path: Path) -> None:
    components = build(Ports(9000), tmp_path, TOOLS)

    assert components["firestore"].health_url == "http://127.0.0.1:9002/"
    assert components["firestore"].probe is Probe.OK_BODY
    assert components["cloud_tasks"].health_url == "http://127.0.0.1:9004/healthz"
    assert components["start_function"].probe is Probe.ANY_HTTP
    assert components["api"].health_url == "http://127.0.0.1:9009/healthz"
    services = [c.name for c in components.values() if c.phase is Phase.SERVICE]
    assert services == ["start_function", "worker", "poller", "api", "sweeper"]
    assert components["sweeper"].probe is Probe.ALIVE and components["sweeper"].ports == ()
    assert components["orders_api"].health_url == "http://127.0.0.1:9010/healthz"
    storage = components["storage"]
    assert storage.health_url == "http://127.0.0.1:9011/" and storage.phase is Phase.BACKING
    assert storage.argv[-2:] == ("--default-bucket", "relayflow-local-payloads")


def test_relayflow_env_points_at_the_ports() -> None:
    env = relayflow_env(Ports(9000))

    assert env == {
        "PUBSUB_EMULATOR_HOST": "127.0.0.1:9001",
        "FIRESTORE_EMULATOR_HOST": "127.0.0.1:9002",
        "CLOUD_TASKS_EMULATOR_HOST": "127.0.0.1:9003",
        "STORAGE_EMULATOR_HOST": "http://127.0.0.1:9011",
        "RELAYFLOW_OFFLOAD_BUCKET": "relayflow-local-payloads",
        "GOOGLE_CLOUD_PROJECT": "relayflow-local",
        "RELAYFLOW_PROJECT_ID": "relayflow-local",
        "RELAYFLOW_WORKER_URL": "http://127.0.0.1:9007",
        "RELAYFLOW_POLLER_URL": "http://127.0.0.1:9008",
        "RELAYFLOW_CLIENT_API_URL": "http://127.0.0.1:9005",
        "RELAYFLOW_OIDC_CERTS_URL": "http://127.0.0.1:9004/oauth2/v1/certs",
        "RELAYFLOW_VERIFY_TOKENS": "true",
        "ORDERS_API_URL": "http://127.0.0.1:9010",
        "RELAYFLOW_API_URL": "http://127.0.0.1:9009",
        "RELAYFLOW_API_VERIFY_TOKENS": "false",
    }
    assert relayflow_env(Ports(9000), "myflows.flows:registry")["RELAYFLOW_APP"] == (
        "myflows.flows:registry"
    )


def test_child_env_overrides_the_callers_and_bypasses_proxies() -> None:
    base = {"PATH": "/bin", "PUBSUB_EMULATOR_HOST": "elsewhere:1", "NO_PROXY": "corp"}

    env = child_env(base, Ports(9000))

    assert env["PATH"] == "/bin"
    assert env["PUBSUB_EMULATOR_HOST"] == "127.0.0.1:9001"
    assert env["NO_PROXY"] == env["no_proxy"] == "corp,127.0.0.1,localhost"


def test_env_file_is_sourceable(tmp_path: Path) -> None:
    path = tmp_path / "env"
    write_env_file(path, {**gcloud_env(Ports(9000)), "ODD": "a b'c"})

    out = subprocess.run(
        ["bash", "-c", f'source "{path}" && echo "$CLOUDSDK_API_ENDPOINT_OVERRIDES_PUBSUB|$ODD"'],
        capture_output=True,
        text=True,
        check=True,
    ).stdout

    assert out.strip() == "http://127.0.0.1:9001/|a b'c"


def test_poll_until_returns_as_soon_as_true_and_gives_up_at_the_deadline() -> None:
    now = [0.0]
    answers = iter([False, False, True])

    assert poll_until(
        lambda: next(answers), timeout_s=10, clock=lambda: now[0], sleep=_advance(now)
    )
    assert now[0] == pytest.approx(0.2)

    assert not poll_until(lambda: False, timeout_s=1, clock=lambda: now[0], sleep=_advance(now))


def _advance(now: list[float]):  # type: ignore[no-untyped-def]
    def sleep(seconds: float) -> None:
        now[0] += seconds

    return sleep


def test_state_file_round_trip_and_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    record = ProcessRecord(
        name="pubsub", pid=42, start_ticks=7, ports=(1, 2), health_url="http://x/",
        probe=Probe.OK_BODY, log="/l",
    )  # fmt: skip
    state = StackState(base_port=9000).with_process(record)

    statefile.save(path, state)
    assert statefile.load(path) == state

    path.write_text("{half", encoding="utf-8")
    assert statefile.load(path) is None
    statefile.remove(path)
    assert statefile.load(path) is None


def test_base_port_from_flag_then_env_then_default(tmp_path: Path) -> None:
    args = argparse.Namespace(base_port=None, state_dir=tmp_path, local_action="status")

    assert commands._stack(args, {}).ports.base == 8120
    assert commands._stack(args, {"RELAYFLOW_BASE_PORT": "9100"}).ports.base == 9100
    args.base_port = 9200
    assert commands._stack(args, {"RELAYFLOW_BASE_PORT": "9100"}).ports.base == 9200


def test_register_adds_local_up_down_status(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    commands.register(parser.add_subparsers(dest="command"))

    args = parser.parse_args(["local", "up", "--base-port", "9300", "--only", "emulators"])

    assert (args.local_action, args.base_port, args.only) == ("up", 9300, "emulators")
    assert args.handler is commands.run


def test_status_when_nothing_runs(tmp_path: Path) -> None:
    out = io.StringIO()

    code = commands.main(["local", "status", "--state-dir", str(tmp_path)], out=out)

    assert code == 0
    assert "not running" in out.getvalue()


def test_unknown_component_is_a_clean_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = commands.main(["local", "up", "--only", "redis", "--state-dir", str(tmp_path)])

    assert code == 1
    assert "unknown component 'redis'" in capsys.readouterr().err


def test_format_table() -> None:
    rows = [
        ComponentStatus("pubsub", (8121,), 10, alive=True, healthy=True, log=""),
        ComponentStatus("cloud_tasks", (8123, 8124), 11, alive=False, healthy=False, log=""),
    ]

    assert commands.format_table(rows).splitlines() == [
        "COMPONENT    PORT       PID  HEALTHY",
        "pubsub       8121       10   yes",
        "cloud_tasks  8123,8124  11   no",
    ]

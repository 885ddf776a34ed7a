"""How fast the relayflow CLI starts, and where `relayflow status ID` spends its time.

    python bench/cli_startup.py [--runs 30] [--base-port 8420]

1. ``relayflow --help``: wall time of the installed command (the console script), ``runs``
   times; median, p90, min.
2. ``relayflow status ID`` against a fresh local stack (started here on ``--base-port``, one
   flow run to its end): wall time, and inside it — measured in the child process — the
   imports (``python -X importtime``), the call to the api, and of that call the api's own
   time (its ``Server-Timing`` header), which is the Firestore read and little else.

Prints one table; exits 1 if ``--help`` takes half a second or more at the median.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from relayflow.local.ports import HOST, Ports  # noqa: E402
from relayflow.local.stack import Stack  # noqa: E402

RELAYFLOW = str(Path(sys.executable).parent / "relayflow")
HELP_BUDGET_S = 0.5
# The child that runs `relayflow status`: the CLI's own main(), with the api calls timed.
CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from relayflow.cli import api as cli_api, commands
calls = []
original = cli_api.Api._call
def timed(self, method, path, data):
    began = time.perf_counter()
    try:
        return original(self, method, path, data)
    finally:
        calls.append(time.perf_counter() - began)
cli_api.Api._call = timed
code = commands.main(sys.argv[1:])
print("BENCH " + json.dumps({"main_s": time.perf_counter() - t0, "api_s": sum(calls),
      "code": code}), file=sys.stderr)
"""


def median(values: list[float]) -> float:
    return statistics.median(values)


def p90(values: list[float]) -> float:
    return sorted(values)[max(0, int(len(values) * 0.9) - 1)]


def time_help(runs: int) -> list[float]:
    walls = []
    for _ in range(runs):
        began = time.perf_counter()
        subprocess.run([RELAYFLOW, "--help"], capture_output=True, check=True)
        walls.append(time.perf_counter() - began)
    return walls


def import_seconds(stderr: str) -> tuple[float, float]:
    """Total import time of a ``-X importtime`` run, and the part imported after ``site``
    (the command's own, as opposed to the interpreter's start)."""
    total = after_site = 0.0
    seen_site = False
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line[13:]:
            continue
        _, cumulative, name = (part for part in line[12:].split("|"))
        if not cumulative.strip().isdigit() or name.startswith("  "):
            continue  # the header, or a nested import (counted in its parent)
        seconds = int(cumulative) / 1e6
        total += seconds
        if seen_site:
            after_site += seconds
        seen_site = seen_site or name.strip() == "site"
    return total, after_site


def time_status(flow_id: str, env: dict[str, str], runs: int) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {"wall": [], "imports": [], "own_imports": [], "api": []}
    for _ in range(runs):
        began = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", CHILD, "status", flow_id],
            capture_output=True, text=True, env=env, check=True,
        )  # fmt: skip
        found["wall"].append(time.perf_counter() - began)
        bench = json.loads(done.stderr.split("BENCH ", 1)[1])
        assert bench["code"] == 0, done.stderr[-2000:]
        total, own = import_seconds(done.stderr)
        found["imports"].append(total)
        found["own_imports"].append(own)
        found["api"].append(bench["api_s"])
    return found


def server_time_s(api_url: str, flow_id: str, runs: int) -> list[float]:
    """The api's own time on ``GET /flows/{id}``, from its Server-Timing header."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    found = []
    for _ in range(runs):
        with opener.open(f"{api_url}/flows/{flow_id}", timeout=10) as response:
            timing = response.headers["Server-Timing"]
        found.append(float(timing.split("dur=")[1]) / 1000)
    return found


def run_flow(env: dict[str, str]) -> str:
    flow_id = f"bench-cli-{os.getpid()}"
    body = json.dumps({"resource": flow_id})
    for argv in (
        ["publish", "registration", "--input", body, "--flow-id", flow_id],
        ["watch", flow_id, "--timeout-s", "120"],
    ):
        subprocess.run([RELAYFLOW, *argv], env=env, capture_output=True, check=True)
    return flow_id


def report(help_s: list[float], status: dict[str, list[float]], server: list[float]) -> None:
    ms = 1000.0
    wall = median(status["wall"])
    rows = [
        ("relayflow --help, wall", help_s),
        ("relayflow status ID, wall", status["wall"]),
        ("  imports, all (-X importtime)", status["imports"]),
        ("  imports after site (the CLI's own)", status["own_imports"]),
        ("  the api call (HTTP round trip)", status["api"]),
        ("    of which the api's time (Firestore)", server),
    ]
    print(f"{'':<42}{'median':>9}{'p90':>9}{'min':>9}   (ms; {len(help_s)} runs each)")
    for name, values in rows:
        print(f"{name:<42}{median(values) * ms:>9.1f}{p90(values) * ms:>9.1f}"
              f"{min(values) * ms:>9.1f}")  # fmt: skip
    imports, call = median(status["imports"]), median(status["api"])
    print(
        f"status: imports {imports / wall:.0%} of the wall time, the api call "
        f"{call / wall:.0%}, the interpreter and the rest {(wall - imports - call) / wall:.0%}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--base-port", type=int, default=8420)
    args = parser.parse_args()
    help_s = time_help(args.runs)
    with tempfile.TemporaryDirectory(prefix="relayflow-bench-cli-") as state_dir:
        stack = Stack(ports=Ports(args.base_port), state_dir=Path(state_dir), sweep_interval_s=0)
        stack.up()
        try:
            env: dict[str, Any] = {**os.environ, **stack.shell_env()}
            flow_id = run_flow(env)
            status = time_status(flow_id, env, args.runs)
            server = server_time_s(f"http://{HOST}:{stack.ports.api}", flow_id, args.runs)
        finally:
            stack.down()
    report(help_s, status, server)
    return 0 if median(help_s) < HELP_BUDGET_S else 1


if __name__ == "__main__":
    sys.exit(main())

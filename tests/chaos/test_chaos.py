"""The chaos suite, bounded: bench/chaos.py with a few dozen flows per scenario, as CI runs it.

Every scenario (workers SIGKILLed mid-call, services dead and healed by `local up`, Firestore
and Cloud Tasks paused, a faulty client API, every task and start message delivered twice)
must end every flow SUCCEEDED with exactly one live registration and entity each: no flow
stuck, no duplicate or orphaned effect; and in `lost` (every response lost for 16 s, flows
timing out meanwhile) every effect of a flow that did not succeed undone by its clean-up.
The script's exit status says whether it did; its table is shown when it did not.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
BASE_PORT = int(os.environ.get("RELAYFLOW_TEST_BASE_PORT", "18120")) + 600
# Two runs at once, each on a stack of its own (ports +600 and +650): a scenario's time is
# mostly waiting (pauses, outages, drains), so side by side they take about as long as the
# longer half, not the sum.
GROUPS = (["kill", "death", "pause", "faults"], ["lost", "duplicates"])


def chaos(scenarios: list[str], base_port: int) -> subprocess.Popen[str]:
    argv = [
        sys.executable, str(REPO / "bench" / "chaos.py"), "--flows", "12", "--pause-s", "8",
        "--outage-s", "16", "--base-port", str(base_port), "--timeout-s", "300",
        "--scenarios", ",".join(scenarios),
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.endswith("_EMULATOR_HOST")}
    return subprocess.Popen(
        argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.timeout(900)
def test_every_scenario_meets_its_target() -> None:
    runs = [chaos(group, BASE_PORT + 50 * i) for i, group in enumerate(GROUPS)]
    for run, group in zip(runs, GROUPS, strict=True):
        stdout, stderr = run.communicate(timeout=800)
        table = stdout[stdout.find("scenario") :]
        assert run.returncode == 0, f"{table}\n{stderr[-3000:]}"
        rows = [line for line in table.splitlines()[2:] if line.strip()]
        assert [row.split()[0] for row in rows] == group
        assert all(row.rstrip().endswith("met") for row in rows), table

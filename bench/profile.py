"""Sample relayflow's handlers with py-spy while a batch runs, and say where their CPU goes.

Used by ``bench/e2e_flows.py --profile DIR``: :func:`attach` starts one ``py-spy record`` per
component (start function, worker, poller; ``--subprocesses`` follows gunicorn's and
functions-framework's workers) writing collapsed stacks ("raw" format) into DIR, and
:func:`detach` stops them (SIGINT: py-spy then writes its file). Idle threads are not sampled
X

    python bench/profile.py DIR [--top 25]

prints, for each component's file in DIR, the share of its samples spent in each of the top
functions, inclusive (the function and what it called) and exclusive (the function's own code).
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

PROFILED = ("start_function", "worker", "poller")
RATE_HZ = 200


@dataclass(frozen=True)
class Recording:
    name: str
    process: subprocess.Popen[bytes]
    path: Path


def attach(pids: dict[str, int], out_dir: Path) -> list[Recording]:
    """Start sampling each profiled component's process tree into ``out_dir``."""
    beside = Path(sys.executable).with_name("py-spy")  # the venv's, when run from it
    py_spy = str(beside) if beside.exists() else "py-spy"
    out_dir.mkdir(parents=True, exist_ok=True)
    recordings = []
    for name in PROFILED:
        if name not in pids:
            continue
        path = out_dir / f"{name}.txt"
        argv = [py_spy, "record", "--pid", str(pids[name]), "--subprocesses", "--format", "raw"]
        argv += ["--rate", str(RATE_HZ), "--gil", "--nonblocking", "--output", str(path)]
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        recordings.append(Recording(name, process, path))
    return recordings


def detach(recordings: list[Recording], timeout_s: float = 30.0) -> None:
    """Stop every recording; py-spy writes its file as it exits."""
    for recording in recordings:
        recording.process.send_signal(signal.SIGINT)
    for recording in recordings:
        try:
            recording.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            recording.process.kill()


def frames(line: str) -> tuple[list[str], int]:
    """A collapsed-stack line ("a;b;c 12") as its frames (outermost first) and sample count."""
    stack, _, count = line.rpartition(" ")
    return stack.split(";"), int(count)


def _function(frame: str) -> str:
    # py-spy writes "function (path/to/file.py:line)"; the line varies within one function.
    name, _, where = frame.partition(" (")
    path = where.rsplit(":", 1)[0]
    for marker in ("site-packages/", "/relayflow/", "/lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{name} ({path})"


def tally(lines: list[str]) -> tuple[int, Counter[str], Counter[str]]:
    """Total samples, inclusive samples per function, exclusive samples per function."""
    total, inclusive, exclusive = 0, Counter[str](), Counter[str]()
    for line in lines:
        if not line.strip():
            continue
        stack, count = frames(line)
        stack = [_function(frame) for frame in stack if not frame.startswith("process ")]
        if not stack:
            continue
        total += count
        for function in set(stack):
            inclusive[function] += count
        exclusive[stack[-1]] += count
    return total, inclusive, exclusive


# What a request spends outside relayflow's own work: the handler's call (the external API,
# which the CPU targets exclude), and in the poller an action run inline after a poll.
HANDLER = "run_handler (relayflow/core/engine/execution.py)"
INLINE = "Delivery._go_on (relayflow/core/engine/delivery.py)"


def share(path: Path, functions: tuple[str, ...]) -> float:
    """The fraction of ``path``'s samples with any of ``functions`` on the stack."""
    total = hit = 0
    for line in path.read_text(errors="replace").splitlines():
        if not line.strip():
            continue
        stack, count = frames(line)
        total += count
        if any(_function(frame) in functions for frame in stack):
            hit += count
    return hit / total if total else 0.0


def report(path: Path, top: int) -> str:
    total, inclusive, exclusive = tally(path.read_text(errors="replace").splitlines())
    lines = [f"## {path.stem}: {total} samples at {RATE_HZ} Hz"]
    lines.append(
        f"handler calls: {share(path, (HANDLER,)):.1%}; inline steps: {share(path, (INLINE,)):.1%}"
    )
    if not total:
        return "\n".join(lines)
    lines.append("inclusive:")
    lines += [f"  {n / total:6.1%}  {f}" for f, n in inclusive.most_common(top)]
    lines.append("exclusive:")
    lines += [f"  {n / total:6.1%}  {f}" for f, n in exclusive.most_common(top)]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    files = sorted(args.dir.glob("*.txt"))
    if not files:
        parser.error(f"no profiles in {args.dir}")
    print("\n\n".join(report(path, args.top) for path in files))
    return 0


if __name__ == "__main__":
    sys.exit(main())

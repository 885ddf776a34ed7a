"""Start components in their own process groups and stop exactly those groups.

Each component is started with ``start_new_session=True``, so its PID is also its process-group
id. The gcloud emulators are a Python wrapper around a Java child: signalling the group is what
reaches the JVM. A recorded start time guards against signalling a recycled PID.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from relayflow.local.polling import poll_until

TERM_GRACE_S = 10.0
KILL_GRACE_S = 5.0


def spawn(
    argv: Sequence[str], *, env: Mapping[str, str], cwd: Path, log_path: Path
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session, stdout and stderr to ``log_path`` (fresh for each run)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
        )


def start_ticks(pid: int) -> int | None:
    """The process's start time (clock ticks since boot), or None if it is gone or unknowable."""
    stat = _read_stat(pid)
    # Fields after "(comm)": state is field 3, starttime is field 22.
    return int(stat[19]) if stat is not None else None


def group_alive(pgid: int) -> bool:
    """Whether any non-zombie process is left in the group."""
    proc = Path("/proc")
    if not proc.is_dir():
        return _group_signal_zero(pgid)
    for entry in proc.iterdir():
        stat = _read_stat(int(entry.name)) if entry.name.isdigit() else None
        # stat[2] is field 5, the process group.
        if stat is not None and stat[0] != "Z" and int(stat[2]) == pgid:
            return True
    return False


def owns_group(pid: int, ticks: int | None) -> bool:
    """Whether the group we started as ``pid`` still has members that are ours.

    A leader with another start time is a stranger reusing the PID. A dead leader with live
    members (an orphaned JVM) is still ours: Linux does not hand out a PID still used as a
    process-group id.
    """
    stat = _read_stat(pid)
    if stat is not None and stat[0] != "Z" and ticks is not None and int(stat[19]) != ticks:
        return False
    return group_alive(pid)


def stop_groups(
    pgids: Sequence[int],
    *,
    reap: Callable[[], object] = lambda: None,
    term_grace_s: float = TERM_GRACE_S,
    kill_grace_s: float = KILL_GRACE_S,
) -> list[int]:
    """SIGTERM every group, SIGKILL what is left after ``term_grace_s``; the groups still alive.

    All groups get SIGTERM at once so their shutdowns overlap. ``reap`` lets the parent collect
    its own children (``Popen.poll``) so they do not linger as zombies while we wait.
    """

    def survivors() -> list[int]:
        reap()
        return [pgid for pgid in pgids if group_alive(pgid)]

    for pgid in pgids:
        _signal_group(pgid, signal.SIGTERM)
    if poll_until(lambda: not survivors(), timeout_s=term_grace_s):
        return []
    for pgid in survivors():
        _signal_group(pgid, signal.SIGKILL)
    poll_until(lambda: not survivors(), timeout_s=kill_grace_s)
    return survivors()


def _read_stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    # The command name may contain spaces and parentheses: split after the last ")".
    return text.rpartition(")")[2].split()


def _signal_group(pgid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signum)


def _group_signal_zero(pgid: int) -> bool:
    return _exists(lambda: os.killpg(pgid, 0))


def _exists(send_signal_zero: Callable[[], None]) -> bool:
    """Signal 0 checks existence only; EPERM still means "exists"."""
    try:
        send_signal_zero()
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

"""``relayflow local up | down | status``: the local stack from the command line.

The main CLI calls :func:`register`; ``python -m relayflow.local.commands`` runs these commands
alone (handy before, or without, the main CLI).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from relayflow.core.queue_shards import MAX_QUEUE_SHARDS
from relayflow.local.names import ALL, DEFAULT_BASE_PORT, DEFAULT_STATE_DIR, GROUPS

if TYPE_CHECKING:  # the stack (and the clients it uses) loads only when a command runs
    from relayflow.local.stack import ComponentStatus, Stack

BASE_PORT_ENV = "RELAYFLOW_BASE_PORT"
APP_ENV = "RELAYFLOW_APP"
TENANTS_ENV = "RELAYFLOW_TENANTS"
QUEUE_SHARDS_ENV = "RELAYFLOW_QUEUE_SHARDS"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``local`` command (with ``up``, ``down``, ``status``) to a CLI."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--base-port",
        type=int,
        default=None,
        help=f"first port of the block (default ${BASE_PORT_ENV} or {DEFAULT_BASE_PORT})",
    )
    common.add_argument(
        "--state-dir",
        type=Path,
        default=DEFAULT_STATE_DIR,
        help=f"where state, logs and the env file live (default {DEFAULT_STATE_DIR})",
    )
    local = subparsers.add_parser("local", help="run the emulators and services on 127.0.0.1")
    actions = local.add_subparsers(dest="local_action", required=True, metavar="ACTION")
    up = actions.add_parser("up", parents=[common], help="start, provision, write the env file")
    up.add_argument(
        "--only",
        default="all",
        help=f"comma-separated components or groups ({', '.join([*GROUPS, *ALL])})",
    )
    up.add_argument(
        "--app",
        default=None,
        help="the flows the services run, as package.module:attribute (default $RELAYFLOW_APP, "
        "else the reference app); the current directory is on the services' PYTHONPATH",
    )
    up.add_argument(
        "--tenants",
        type=Path,
        default=None,
        help="a JSON file of tenants' limits and priorities, as RELAYFLOW_TENANTS holds it "
        "(default $RELAYFLOW_TENANTS, else no limits); see the README's Tenants",
    )
    up.add_argument(
        "--queue-shards",
        type=int,
        default=None,
        metavar="N",
        help=f"queues of each kind (steps, polls, their high twins) to provision, the "
        f"services' RELAYFLOW_QUEUE_SHARDS (default ${QUEUE_SHARDS_ENV}, else topology.json's)",
    )
    up.add_argument(
        "--sweep-interval-s",
        type=float,
        default=60.0,
        help="how often the sweeper runs, as Cloud Scheduler does in the cloud (0: no sweeper)",
    )
    up.add_argument(
        "--duplicate-rate",
        type=float,
        default=0.0,
        help="share of Cloud Tasks deliveries to repeat, 0..1 (tests idempotency; default 0)",
    )
    actions.add_parser("down", parents=[common], help="stop what `up` started")
    actions.add_parser("status", parents=[common], help="one row per component")
    local.set_defaults(handler=run)


def run(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    """Handle ``relayflow local ACTION``; returns the exit code."""
    from relayflow.core.errors import ConfigError
    from relayflow.local.stack import StackError

    out = out or sys.stdout
    try:
        stack = _stack(args, os.environ)
        handler = {"up": _up, "down": _down, "status": _status}[args.local_action]
        return handler(stack, out)
    except (StackError, ValueError, ConfigError) as error:
        print(f"relayflow local {args.local_action}: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        # Stack.up has already stopped what it started.
        print(f"relayflow local {args.local_action}: interrupted", file=sys.stderr)
        return 130


def _stack(args: argparse.Namespace, environ: Mapping[str, str]) -> Stack:
    base = args.base_port or int(environ.get(BASE_PORT_ENV) or DEFAULT_BASE_PORT)
    only = getattr(args, "only", "all")
    components = [name.strip() for name in only.split(",") if name.strip()]
    duplicate_rate = getattr(args, "duplicate_rate", 0.0)
    sweep_interval_s = getattr(args, "sweep_interval_s", 60.0)
    app = getattr(args, "app", None) or environ.get(APP_ENV) or None
    queue_shards = queue_shards_of(getattr(args, "queue_shards", None), environ)
    base_env = dict(environ)
    tenants_file = getattr(args, "tenants", None)
    if tenants_file is not None:
        base_env[TENANTS_ENV] = read_tenants(tenants_file)
    from relayflow.local.ports import Ports
    from relayflow.local.stack import Stack

    def progress(line: str) -> None:
        print(f"  {line}", file=sys.stderr, flush=True)

    return Stack(
        ports=Ports(base),
        state_dir=args.state_dir,
        base_env=base_env,
        components=components,
        duplicate_rate=duplicate_rate,
        sweep_interval_s=sweep_interval_s,
        app=app,
        app_path=Path.cwd() if app else None,
        progress=progress,
        queue_shards=queue_shards,
    )


def queue_shards_of(flag: int | None, environ: Mapping[str, str]) -> int | None:
    """``--queue-shards``, else $RELAYFLOW_QUEUE_SHARDS, else None; a bad count is refused
    here (ValueError), before anything starts."""
    raw = str(flag) if flag is not None else (environ.get(QUEUE_SHARDS_ENV) or "").strip()
    if not raw:
        return None
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_QUEUE_SHARDS:
        source = "--queue-shards" if flag is not None else QUEUE_SHARDS_ENV
        raise ValueError(f"{source} must be a whole number in 1..{MAX_QUEUE_SHARDS}, not {raw!r}")
    return int(raw)


def read_tenants(path: Path) -> str:
    """The tenants file's text, checked here so a typo fails before anything starts."""
    from relayflow.core.tenants import Tenants

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"--tenants {path}: {exc.strerror}") from None
    Tenants.parse(text)  # raises ConfigError saying what is wrong
    return text


def check_app(target: str, app_path: Path) -> str:
    """Load ``target`` here first, so a bad app fails in a second, before anything starts;
    the flows it registers, for the start-up message."""
    from relayflow.app import load_registry
    from relayflow.settings import load_settings

    if str(app_path) not in sys.path:
        sys.path.insert(0, str(app_path))
    registry = load_registry(target, load_settings())
    return ", ".join(flow.label for flow in registry)


def _up(stack: Stack, out: TextIO) -> int:
    if stack.app and stack.app_path:
        print(f"app {stack.app}: {check_app(stack.app, stack.app_path)}", file=out)
    result = stack.up()
    names = ", ".join(record.name for record in result.state.processes)
    if not result.started and result.restarted:
        print(f"restarted what was dead: {', '.join(result.restarted)}", file=out)
        return 0
    if not result.started:
        print(
            f"already running: the local stack in {stack.state_dir} (base port "
            f"{result.state.base_port}: {names}); `relayflow local down` stops it",
            file=out,
        )
        return 0
    if result.cleaned_stale:
        print("cleaned stale state from a stack that was no longer running", file=out)
    print(f"started on 127.0.0.1 (base port {stack.ports.base}): {names}", file=out)
    print(f"logs: {stack.logs_dir}/<component>.log", file=out)
    print(f"for a shell: source {stack.env_file}", file=out)
    return 0


def _down(stack: Stack, out: TextIO) -> int:
    stopped = stack.down()
    print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running", file=out)
    return 0


def _status(stack: Stack, out: TextIO) -> int:
    rows = stack.status()
    if not rows:
        print(f"not running (no state in {stack.state_dir})", file=out)
        return 0
    print(format_table(rows), file=out)
    return 0 if all(row.healthy for row in rows) else 1


def format_table(rows: Sequence[ComponentStatus]) -> str:
    """component, port, pid, healthy: aligned columns."""
    table = [("COMPONENT", "PORT", "PID", "HEALTHY")]
    for row in rows:
        ports = ",".join(str(port) for port in row.ports)
        table.append((row.name, ports, str(row.pid), "yes" if row.healthy else "no"))
    widths = [max(len(line[i]) for line in table) for i in range(4)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in table
    )


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    """The ``local`` command alone, as ``python -m relayflow.local.commands local ...``."""
    parser = argparse.ArgumentParser(prog="relayflow")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return run(args, out=out)


if __name__ == "__main__":
    raise SystemExit(main())

"""The ``relayflow`` command: publish flows, read them, watch them, run the local stack.

    relayflow publish registration --input '{"resource": "acme-1"}'
    relayflow status FLOW_ID          relayflow watch FLOW_ID
    relayflow list --status RUNNING   relayflow demo
    relayflow local up | down | status

Talks to whatever the environment points at: the local stack after
``source .relayflow/local/env``, or Google Cloud with application default credentials.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
import threading
from collections.abc import Sequence
from typing import Any

from google.api_core.exceptions import GoogleAPIError
from pydantic import ValidationError

from relayflow.cli import shapes
from relayflow.core.errors import ConfigError, UnknownFlow
from relayflow.core.messages import MAX_DEADLINE_S, describe
from relayflow.core.position import FLOW_ID_PATTERN
from relayflow.core.records import FlowRecord, HistoryEntry
from relayflow.core.state import TERMINAL, Status
from relayflow.settings import Settings, load_settings

LOCAL_ENV_HINT = (
    "no emulator hosts are set and the project is relayflow-local: start the local stack with "
    "`relayflow local up` and run `source .relayflow/local/env` first"
)


class UsageError(Exception):
    """Raised for a command line that cannot be acted on; printed, exit status 2."""


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object, got {type(value).__name__}")
    return value


def _flow_id(text: str) -> str:
    if not re.fullmatch(FLOW_ID_PATTERN[1:-1], text):
        raise argparse.ArgumentTypeError(f"{text!r} does not match {FLOW_ID_PATTERN}")
    return text


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value <= MAX_DEADLINE_S:
        raise argparse.ArgumentTypeError(f"must be in (0, {MAX_DEADLINE_S}]")
    return value


def _count(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 100_000:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer in 1..100000")
    return int(text)


def _flow_name(text: str) -> str:
    if not re.fullmatch(r"[a-z][a-z0-9_-]{0,62}", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a flow name ([a-z][a-z0-9_-]{{0,62}})")
    return text


def _version(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 1_000_000:
        raise argparse.ArgumentTypeError(f"{text!r} is not a version (an integer >= 1)")
    return int(text)


def _status(text: str) -> Status:
    try:
        return Status(text.upper())
    except ValueError:
        allowed = ", ".join(s.value for s in Status)
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {allowed}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="relayflow",
        description="Publish, read and watch relayflow flows; run the local stack.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    pub = sub.add_parser("publish", help="publish a start message to flow-requests")
    pub.add_argument("flow", help="flow name, e.g. registration")
    pub.add_argument("--input", type=_json_object, default={}, help="flow input (JSON object)")
    pub.add_argument("--flow-id", type=_flow_id, help="idempotent id: republishing starts nothing")
    pub.add_argument("--deadline-s", type=_positive, help="absolute deadline for the flow")

    st = sub.add_parser("status", help="show a flow")
    st.add_argument("flow_id", type=_flow_id)
    st.add_argument("--json", action="store_true", help="print the whole document as JSON")

    watch = sub.add_parser("watch", help="follow a flow live until it ends")
    watch.add_argument("flow_id", type=_flow_id)
    watch.add_argument("--timeout-s", type=_positive, default=1800.0)

    ls = sub.add_parser("list", help="list flows, newest first")
    ls.add_argument("--status", type=_status)
    ls.add_argument("--flow", type=_flow_name, help="only flows of this name")
    ls.add_argument("--version", type=_version, help="only flows started on this version")
    ls.add_argument("--limit", type=_count, default=20)

    app = argparse.ArgumentParser(add_help=False)
    app.add_argument(
        "--app",
        help="the flows, as package.module:attribute (default $RELAYFLOW_APP, else the "
        "reference app)",
    )
    demo = sub.add_parser(
        "demo", parents=[app], help="run the app's demo batch of flows through the local stack"
    )
    demo.add_argument("--flows", type=_count, default=24)
    demo.add_argument("--timeout-s", type=_positive, default=180.0)

    sub.add_parser("sweep", parents=[app], help="re-enqueue overdue flows whose next task was lost")
    shapes.register(sub, app)
    _register_local(sub)
    return parser


def _register_local(sub: Any) -> None:
    from relayflow.local import commands

    commands.register(sub)


def _settings(args: argparse.Namespace | None = None) -> Settings:
    app = getattr(args, "app", None)
    if app and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # a team's package, as `python -m` would find it
    try:
        settings = load_settings(**({"app": app} if app else {}))
    except ValidationError as exc:
        raise UsageError(f"bad configuration: {describe(exc)}") from None
    local = settings.project_id == "relayflow-local"
    if local and not (settings.firestore_emulator_host and settings.pubsub_emulator_host):
        raise UsageError(LOCAL_ENV_HINT)
    _check_emulators(settings)
    return settings


def _check_emulators(settings: Settings) -> None:
    """Fail fast and clearly when an emulator the environment names is not listening.

    The client libraries would otherwise retry a refused connection for a minute or more.
    """
    hosts = {
        "Pub/Sub": settings.pubsub_emulator_host,
        "Firestore": settings.firestore_emulator_host,
        "Cloud Tasks": settings.cloud_tasks_emulator_host,
    }
    for name, host in hosts.items():
        if host is None:
            continue
        address, _, port = host.rpartition(":")
        try:
            socket.create_connection((address, int(port)), timeout=2.0).close()
        except OSError as exc:
            raise UsageError(
                f"the {name} emulator at {host} is not answering ({exc.strerror or exc}); "
                "is the local stack up? `relayflow local status` shows it"
            ) from None


def cmd_publish(args: argparse.Namespace) -> int:
    from relayflow.gcp.events import Events, build_publisher
    from relayflow.topology import load_topology

    settings = _settings()
    body: dict[str, Any] = {"flow": args.flow, "input": args.input}
    if args.flow_id:
        body["flow_id"] = args.flow_id
    if args.deadline_s:
        body["deadline_s"] = args.deadline_s
    events = Events(build_publisher(), project=settings.project_id)
    message_id = events.publish(load_topology().topics.requests, body)
    print(f"published message {message_id}; flow id {args.flow_id or message_id}")
    return 0


def _store(settings: Settings) -> Any:
    from relayflow.gcp.store import FlowStore, build_client
    from relayflow.topology import load_topology

    names = load_topology().firestore
    return FlowStore(
        build_client(settings), flows=names.flows_collection, rejected=names.rejected_collection
    )


def format_entry(entry: HistoryEntry) -> str:
    """One history line: time, step, try, what was seen, the delay chosen."""
    at = entry.at.strftime("%H:%M:%S.%f")[:-3]
    which = f"poll {entry.poll}" if entry.kind == "poll" else f"{entry.kind} #{entry.attempt}"
    delay = f"  next in {entry.delay_s:.2f}s" if entry.delay_s is not None else ""
    detail = f" ({entry.detail})" if entry.detail and entry.detail not in entry.outcome else ""
    return f"  {at}  {entry.step:<20} {which:<12} {entry.outcome}{detail}{delay}"


def format_record(record: FlowRecord) -> str:
    lines = [
        f"flow {record.flow_id} ({record.flow} v{record.version}, "
        f"generation {record.position.generation})",
        f"  status    {record.status}",
        f"  position  {record.position.label()}",
        f"  polls     {record.polls}   attempts {record.attempts}",
        f"  created   {record.created_at.isoformat()}",
    ]
    lines += shapes.running(record)
    if record.result:
        lines.append(f"  result    {record.result.code}: {record.result.message}")
        payload = record.result.data or record.result.error
        lines.append(f"            {json.dumps(payload, default=str)}")
    lines.append("history:")
    lines.extend(format_entry(e) for e in record.history[-20:])
    return "\n".join(lines)


def cmd_status(args: argparse.Namespace) -> int:
    record = _store(_settings()).get(args.flow_id)
    if record is None:
        print(f"no flow with id {args.flow_id!r}", file=sys.stderr)
        return 1
    print(record.model_dump_json(indent=2) if args.json else format_record(record))
    return 0


def cmd_watch(args: argparse.Namespace) -> int:
    """Follow a flow through a Firestore listener: each new history entry as it lands."""
    from relayflow.gcp.store import build_client
    from relayflow.topology import load_topology

    settings = _settings()
    client = build_client(settings)
    ref = client.collection(load_topology().firestore.flows_collection).document(args.flow_id)
    ended = threading.Event()
    shown = [0]

    def on_snapshot(docs: list[Any], *_: object) -> None:
        for doc in docs:
            if not doc.exists:
                print(f"waiting for flow {args.flow_id} to exist…", flush=True)
                continue
            record = FlowRecord.from_doc(doc.to_dict() or {})
            total = record.history_dropped + len(record.history)
            for entry in record.history[max(0, len(record.history) - (total - shown[0])) :]:
                print(format_entry(entry), flush=True)
            shown[0] = total
            if record.status in TERMINAL:
                print(format_record(record).split("history:")[0], flush=True)
                ended.set()

    watch = ref.on_snapshot(on_snapshot)
    try:
        finished = ended.wait(args.timeout_s)
    finally:
        watch.unsubscribe()  # type: ignore[no-untyped-call]
    if not finished:
        print(f"flow {args.flow_id} still running after {args.timeout_s:.0f}s", file=sys.stderr)
        return 1
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    records = _store(_settings()).recent(
        status=args.status, flow=args.flow, version=args.version, limit=args.limit
    )
    print(f"{'FLOW ID':<40} {'FLOW':<18} {'STATUS':<13} {'POSITION':<32} UPDATED")
    for r in records:
        name = f"{r.flow} v{r.version}"
        print(
            f"{r.flow_id:<40} {name:<18} {r.status:<13} {r.position.label():<32} "
            f"{r.updated_at.isoformat(timespec='seconds')}"
        )
    if not records:
        print("(no flows)")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from relayflow.cli.demo import run_demo

    return run_demo(_settings(args), flows=args.flows, timeout_s=args.timeout_s)


def cmd_graph(args: argparse.Namespace) -> int:
    from relayflow.app import load_registry

    settings = _settings_offline(args)
    flow = load_registry(settings.app, settings).get(args.flow, args.version)
    print(shapes.render(flow, mermaid=args.mermaid))
    return 0


def _settings_offline(args: argparse.Namespace) -> Settings:
    """Settings for a command that only reads the app (no emulator, no cloud)."""
    app = getattr(args, "app", None)
    if app and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return load_settings(**({"app": app} if app else {}))
    except ValidationError as exc:
        raise UsageError(f"bad configuration: {describe(exc)}") from None


def cmd_sweep(args: argparse.Namespace) -> int:
    from relayflow.runtime import build_runtime

    settings = _settings(args)
    report = build_runtime(settings).engine.sweep(grace_s=settings.sweep_grace_s)
    print(json.dumps(report.__dict__))
    return 0


COMMANDS = {
    "publish": cmd_publish,
    "status": cmd_status,
    "watch": cmd_watch,
    "list": cmd_list,
    "demo": cmd_demo,
    "sweep": cmd_sweep,
    "graph": cmd_graph,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = COMMANDS.get(args.command) or args.handler
    try:
        code: int = handler(args)
    except (UsageError, ConfigError, UnknownFlow) as exc:
        print(f"relayflow: {exc}", file=sys.stderr)
        return 2
    except (GoogleAPIError, TimeoutError) as exc:
        print(f"relayflow {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())

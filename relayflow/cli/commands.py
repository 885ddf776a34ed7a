"""The ``relayflow`` command: publish flows, read and operate them, run the local stack.

    relayflow publish registration --input '{"resource": "acme-1"}'
    relayflow status FLOW_ID          relayflow watch FLOW_ID
    relayflow list --status RUNNING --flow registration --counts
    relayflow cancel FLOW_ID --reason "duplicate order"    relayflow retry FLOW_ID --reason …
    relayflow reset FLOW_ID --to-step STEP --reason … [--keep-effects] [--dry-run]
    relayflow tenants list | pause TENANT --reason … | resume TENANT --reason …
    relayflow schedules list | pause NAME --reason … | resume NAME --reason … | trigger NAME …
    relayflow bulk retry --code RETRIES_EXHAUSTED --since T --reason … --dry-run | run ID
    relayflow bulk reset --flow F --to-step STEP --reason … --dry-run | status ID --follow
    relayflow breakers
    relayflow rejected list           relayflow dead-letters list | replay MESSAGE_ID
    relayflow versions list | check [--app module:attr]
    relayflow drain --flow F --version V    (wait until no flow runs on the version)
    relayflow demo                    relayflow local up | down | status
    relayflow migrate-shards          (once, after upgrading to sharded indexes)

``publish``, ``watch``, ``demo``, ``sweep`` and ``migrate-shards`` talk to Pub/Sub and Firestore
directly, as the environment says (``source .relayflow/local/env``, or Google Cloud with application
default credentials); the operator commands go through the api (``RELAYFLOW_API_URL``), as the
console does, so they act with the caller's identity and role.

This module imports only the standard library: ``relayflow --help`` must print at once, and
each command loads what it needs when it runs (bench/cli_startup.py measures both).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from relayflow.settings import Settings

# The same rules as relayflow.core (a unit test keeps them equal); repeated here so that
# checking an argument imports nothing.
FLOW_ID = re.compile(r"[A-Za-z0-9_-]{1,100}")
SCHEDULE_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
STEP = re.compile(r"[a-z][a-z0-9_]{0,62}")  # a step name (core.position.STEP_NAME_PATTERN)
FLOW_NAME = re.compile(r"[a-z][a-z0-9_-]{0,62}")
TENANT = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
CURSOR = re.compile(r"[A-Za-z0-9_-]{1,4000}")
BULK_ID = re.compile(r"bulk-[0-9a-f]{12}")
LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
LABEL_VALUE = re.compile(r"[A-Za-z0-9_.@:/+-]{1,63}")
MAX_LABELS = 16
DEPENDENCY = re.compile(r"[a-z][a-z0-9-]{0,62}")
MAX_CODE_CHARS = 100
KMS_KEY_URI = re.compile(
    r"gcp-kms://projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+"
)
STATUSES = ("PENDING", "RUNNING", "COMPENSATING", "SUCCEEDED", "FAILED", "TIMED_OUT", "CANCELLED")
# How often ``watch`` reads a poll chain's task for the polls its flow's document has not
# recorded yet (a GetTask per candidate the chain may have made: only while someone watches).
WATCH_CHAIN_S = 1.0
MAX_DEADLINE_S = 30 * 24 * 3600
MAX_LIST = 500
MAX_REASON_CHARS = 500

LOCAL_ENV_HINT = (
    "no emulator hosts are set and the project is relayflow-local: start the local stack with "
    "`relayflow local up` and run `source .relayflow/local/env` first"
)


class UsageError(Exception):
    """Raised for a command line that cannot be acted on; printed, exit status 2."""


# -- arguments -------------------------------------------------------------------------------


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object, got {type(value).__name__}")
    return value


def _flow_id(text: str) -> str:
    if not FLOW_ID.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} does not match ^[A-Za-z0-9_-]{{1,100}}$")
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


def _page_size(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_LIST:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer in 1..{MAX_LIST}")
    return int(text)


def _flow_name(text: str) -> str:
    if not FLOW_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a flow name ([a-z][a-z0-9_-]{{0,62}})")
    return text


def _tenant(text: str) -> str:
    if not TENANT.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a tenant name ([a-z0-9][a-z0-9-]{{0,62}})"
        )
    return text


def _kms_key_uri(text: str) -> str:
    if not KMS_KEY_URI.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a Cloud KMS key URI "
            "(gcp-kms://projects/P/locations/L/keyRings/R/cryptoKeys/K)"
        )
    return text


def _version(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 1_000_000:
        raise argparse.ArgumentTypeError(f"{text!r} is not a version (an integer >= 1)")
    return int(text)


def _status(text: str) -> str:
    if text.upper() not in STATUSES:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(STATUSES)}")
    return text.upper()


def _label(text: str) -> str:
    """``key=value``: a label a flow carries (``relayflow.core.labels``)."""
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"{text!r} is not key=value (e.g. order_id=123)")
    if not LABEL_KEY.fullmatch(key):
        raise argparse.ArgumentTypeError(f"label key {key!r} must match {LABEL_KEY.pattern}")
    if not LABEL_VALUE.fullmatch(value):
        raise argparse.ArgumentTypeError(
            f"label {key}'s value {value!r} must match {LABEL_VALUE.pattern}"
        )
    return text


def _labels(given: Sequence[str]) -> dict[str, str]:
    """Repeated ``--label key=value`` as a start message's ``labels`` (each key once)."""
    if len(given) > MAX_LABELS:
        raise UsageError(f"at most {MAX_LABELS} labels, got {len(given)}")
    found: dict[str, str] = {}
    for text in given:
        key, _, value = text.partition("=")
        if key in found:
            raise UsageError(f"--label {key} is given twice ({found[key]!r}, {value!r})")
        found[key] = value
    return found


def _dependency(text: str) -> str:
    if not DEPENDENCY.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a dependency ({DEPENDENCY.pattern})")
    return text


def _code(text: str) -> str:
    if not 1 <= len(text) <= MAX_CODE_CHARS or not text.isprintable():
        raise argparse.ArgumentTypeError(f"a code is 1..{MAX_CODE_CHARS} printable characters")
    return text


def _time(text: str) -> str:
    try:
        datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO 8601 time like 2026-03-01T12:00:00Z (no zone: UTC)"
        ) from None
    return text


def _cursor(text: str) -> str:
    if not CURSOR.fullmatch(text):
        raise argparse.ArgumentTypeError("not a cursor (copy it from the `more:` line)")
    return text


def _schedule(text: str) -> str:
    if not SCHEDULE_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a schedule name ([a-z0-9][a-z0-9_-]{{0,62}})"
        )
    return text


def _schedules_parser(sub: Any) -> None:
    schedules = sub.add_parser(
        "schedules", help="the app's schedules: next ticks, last runs; pause, resume, trigger"
    )
    schedules_sub = schedules.add_subparsers(dest="schedules_action", required=True)
    schedules_sub.add_parser("list", help="next ticks (its zone and UTC), last runs, paused or not")
    actions = (
        ("pause", "start none of its ticks until resumed"),
        ("resume", "start its ticks again, from the next one (the pause's are not caught up)"),
        ("trigger", "start its flow now, paused or not"),
    )
    for name, does in actions:
        act = schedules_sub.add_parser(name, help=f"{does} (operator role)")
        act.add_argument("schedule", type=_schedule)
        act.add_argument("--reason", type=_reason, required=True, help="why (recorded)")
        if name == "trigger":
            act.add_argument(
                "--flow-id", type=_flow_id, help="the run's id (default: sched-NAME-manual-TIME)"
            )


def _bulk_parser(sub: Any) -> None:
    bulk = sub.add_parser(
        "bulk",
        help="retry or cancel every flow a filter matches, server-side, after a dry run",
    )
    bulk_sub = bulk.add_subparsers(dest="bulk_action", required=True)
    for name, does in (
        ("retry", "run again every ended flow the filter matches"),
        ("cancel", "cancel every active flow the filter matches (undoing what each did)"),
        ("reset", "run every ended flow the filter matches again from a step"),
    ):
        act = bulk_sub.add_parser(name, help=f"{does} (operator role)")
        if name == "reset":
            act.add_argument("--to-step", type=_step, required=True, help="the step to reset to")
            act.add_argument(
                "--keep-effects",
                action="store_true",
                help="keep what ran from the step (replayed under its keys), not undo it first",
            )
        act.add_argument("--flow", type=_flow_name, help="only flows of this name")
        act.add_argument("--status", type=_status)
        act.add_argument("--version", type=_version)
        act.add_argument("--tenant", type=_tenant)
        act.add_argument("--parent", type=_flow_id, help="only the child flows of flow ID")
        _found_by(act)
        act.add_argument("--since", type=_time, help="updated at or after (ISO 8601, UTC)")
        act.add_argument("--until", type=_time, help="updated before (ISO 8601, UTC)")
        act.add_argument("--reason", type=_reason, required=True, help="why (recorded)")
        act.add_argument(
            "--rate", type=_rate, default=5.0, help="flows a second (0.01..50, default 5)"
        )
        act.add_argument("--dry-run", action="store_true", help="only say what would happen")
        act.add_argument("--yes", action="store_true", help="run it without asking")
        act.add_argument("--follow", action="store_true", help="show its progress until done")
    bulk_sub.add_parser("list", help="bulk actions, the newest first").add_argument(
        "--limit", type=_page_size, default=20
    )
    for name, does in (
        ("status", "its progress (--follow: a live line until it is over)"),
        ("previews", "every flow's row: what the dry run said, what was done"),
        ("run", "act on exactly the flows its dry run listed (operator role)"),
        ("pause", "stop after the batch under way (operator role)"),
        ("resume", "go on from the next batch (operator role)"),
        ("stop", "cancel the bulk action itself; what it did stays done (operator role)"),
    ):
        act = bulk_sub.add_parser(name, help=does)
        act.add_argument("bulk_id", type=_bulk_id)
        if name in ("status", "run"):
            act.add_argument("--follow", action="store_true", help="a live progress line")
        if name == "previews":
            act.add_argument("--page", type=int, default=0, help="0, 1, … (100 flows a page)")
        if name in ("run", "pause", "resume", "stop"):
            act.add_argument(
                "--reason", type=_reason, required=name == "stop", help="why (recorded)"
            )


def _bulk_id(text: str) -> str:
    if not BULK_ID.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a bulk action id (bulk-<12 hex>)")
    return text


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.01 <= value <= 50:
        raise argparse.ArgumentTypeError("must be 0.01..50 flows a second")
    return value


def _reason(text: str) -> str:
    reason = " ".join(text.split())
    if not reason:
        raise argparse.ArgumentTypeError("say why: the reason is recorded with your name")
    if len(reason) > MAX_REASON_CHARS or not reason.isprintable():
        raise argparse.ArgumentTypeError(f"must be at most {MAX_REASON_CHARS} printable characters")
    return reason


def _step(text: str) -> str:
    if not STEP.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a step name (^[a-z][a-z0-9_]{{0,62}}$)")
    return text


def _message_id(text: str) -> str:
    if not 0 < len(text) <= 200 or not text.isprintable():
        raise argparse.ArgumentTypeError("not a message id (1..200 printable characters)")
    return text


# -- the parser ------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="relayflow",
        description="Publish, read, watch and operate relayflow flows; run the local stack.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _register_flows(sub)
    _register_operations(sub)
    _register_tools(sub)
    _register_local(sub)
    return parser


def _register_flows(sub: Any) -> None:
    pub = sub.add_parser(
        "publish",
        help="publish a start message: on flow-requests, or a named tenant's own topic",
    )
    pub.add_argument("flow", help="flow name, e.g. registration")
    pub.add_argument("--input", type=_json_object, default={}, help="flow input (JSON object)")
    pub.add_argument("--flow-id", type=_flow_id, help="idempotent id: republishing starts nothing")
    pub.add_argument("--deadline-s", type=_positive, help="absolute deadline for the flow")
    pub.add_argument(
        "--tenant",
        type=_tenant,
        help="whose flow it is (default: default); a named tenant's start messages go on its "
        "own topic, flow-requests.TENANT",
    )
    pub.add_argument("--priority", choices=("high", "low"), help="default: the tenant's priority")
    pub.add_argument(
        "--label",
        type=_label,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"a label to find the flow by, e.g. order_id=123 (repeat: up to {MAX_LABELS})",
    )

    st = sub.add_parser("status", help="show a flow (through the api)")
    st.add_argument("flow_id", type=_flow_id)
    _whose(st)
    st.add_argument("--json", action="store_true", help="print the whole document as JSON")
    st.add_argument(
        "--resolve",
        action="store_true",
        help="read offloaded payloads back (input, outputs, result: at most 16 MiB)",
    )

    watch = sub.add_parser("watch", help="follow a flow live until it ends")
    watch.add_argument("flow_id", type=_flow_id)
    watch.add_argument("--tenant", type=_tenant, default="default", help="whose flow it is")
    watch.add_argument("--timeout-s", type=_positive, default=1800.0)

    ls = sub.add_parser("list", help="list flows, newest update first (through the api)")
    ls.add_argument("--flow", type=_flow_name, help="only flows of this name")
    ls.add_argument("--status", type=_status)
    ls.add_argument("--version", type=_version, help="only flows started on this version")
    ls.add_argument("--tenant", type=_tenant, help="only this tenant's flows")
    ls.add_argument("--parent", metavar="ID", help="only the child flows of flow ID")
    _found_by(ls)
    ls.add_argument("--updated-from", type=_time, help="updated at or after (ISO 8601, UTC)")
    ls.add_argument("--updated-to", type=_time, help="updated before (ISO 8601, UTC)")
    ls.add_argument("--limit", type=_page_size, default=20, help=f"per page, 1..{MAX_LIST}")
    ls.add_argument("--cursor", type=_cursor, help="the next page, as the last one said")
    ls.add_argument("--counts", action="store_true", help="first, how many in each status")
    ls.add_argument("--json", action="store_true", help="print the api's answer as JSON")


def _found_by(parser: Any) -> None:
    """``--label``, ``--code`` and ``--dependency``: what a list and a bulk action find flows by."""
    parser.add_argument(
        "--label",
        type=_label,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="only flows with this label (repeat: with all of them; put the rarest first)",
    )
    parser.add_argument("--code", type=_code, help="only flows that ended with this result code")
    parser.add_argument(
        "--dependency",
        type=_dependency,
        help="only flows put off for, or failed at a step calling, this dependency",
    )


def _whose(parser: Any) -> None:
    parser.add_argument(
        "--tenant",
        type=_tenant,
        help="whose flow it is, when several of your tenants use the id",
    )


def _register_operations(sub: Any) -> None:
    for name, does, waits in (
        ("cancel", "undo its done steps and end it", "it ends"),
        ("retry", "run it again", "it ends"),
        ("undo", "undo again what an ended flow left live", "its clean-up is over"),
    ):
        action = sub.add_parser(name, help=f"{name} a flow: {does} (operator role)")
        action.add_argument("flow_id", type=_flow_id)
        _whose(action)
        action.add_argument("--reason", type=_reason, required=True, help="why (recorded)")
        action.add_argument("--wait", action="store_true", help=f"follow it until {waits}")

    _register_reset(sub)
    _register_signal(sub)
    _register_versions(sub)
    tenants = sub.add_parser("tenants", help="tenants' limits and state; pause and resume them")
    tenants_sub = tenants.add_subparsers(dest="tenants_action", required=True)
    tenants_sub.add_parser("list", help="limits, paused or not, flows running and waiting")
    for name, does in (("pause", "stop dispatching its flows"), ("resume", "go on with them")):
        act = tenants_sub.add_parser(name, help=f"{does} (operator role)")
        act.add_argument("tenant", type=_tenant)
        act.add_argument("--reason", type=_reason, required=True, help="why (recorded)")

    _schedules_parser(sub)
    _bulk_parser(sub)

    sub.add_parser(
        "breakers", help="each dependency's breaker: state, failures, retry budget, transitions"
    )

    rejected = sub.add_parser("rejected", help="messages refused with their reasons")
    rejected_sub = rejected.add_subparsers(dest="rejected_action", required=True)
    rl = rejected_sub.add_parser("list", help="newest first")
    rl.add_argument("--limit", type=_page_size, default=20)
    rl.add_argument("--cursor", type=_cursor)

    dead = sub.add_parser("dead-letters", help="start messages that failed every delivery")
    dead_sub = dead.add_subparsers(dest="dead_letters_action", required=True)
    dl = dead_sub.add_parser("list", help="what the dead-letter hold keeps")
    dl.add_argument("--limit", type=_page_size, default=100)
    replay = dead_sub.add_parser(
        "replay", help="publish one back where it came from, then drop it (operator role)"
    )
    replay.add_argument("message_id", type=_message_id)
    replay.add_argument("--reason", type=_reason, required=True, help="why (recorded)")
    replay.add_argument(
        "--edit-json",
        type=_json_object,
        help="publish this start message instead (a JSON object), e.g. with a fixed input",
    )


def _register_reset(sub: Any) -> None:
    reset = sub.add_parser(
        "reset", help="reset a flow to a step: run an ended flow again from it (operator role)"
    )
    reset.add_argument("flow_id", type=_flow_id)
    _whose(reset)
    reset.add_argument(
        "--to-step", dest="step", type=_step, required=True, help="the step to run again from"
    )
    reset.add_argument("--reason", type=_reason, required=True, help="why (recorded)")
    reset.add_argument(
        "--keep-effects",
        action="store_true",
        help="do not undo the effects of the step and those after it: each step replays its "
        "effect under the same idempotency key",
    )
    reset.add_argument(
        "--dry-run", action="store_true", help="print what it would do, and do nothing"
    )
    reset.add_argument("--wait", action="store_true", help="follow it until it ends")


def _register_signal(sub: Any) -> None:
    signal = sub.add_parser(
        "signal", help="send a signal to a flow's WaitForSignal step (signaller or operator role)"
    )
    signal.add_argument("flow_id", type=_flow_id)
    signal.add_argument("name", help="the signal's name, e.g. approve")
    signal.add_argument(
        "--data", type=_json_object, default={}, help="the signal's data, a JSON object"
    )
    signal.add_argument("--reason", type=_reason, required=True, help="why (recorded)")
    signal.add_argument("--id", dest="signal_id", help="a signal id: sending it again is a no-op")
    signal.add_argument(
        "--item", type=int, help="the ForEach item it is for, if an item's step waits for it"
    )
    _whose(signal)


def _register_versions(sub: Any) -> None:
    versions = sub.add_parser(
        "versions", help="flows not ended on each deployed version; check a deploy drops none"
    )
    versions_sub = versions.add_subparsers(dest="versions_action", required=True)
    listed = versions_sub.add_parser("list", help="flows not ended on each deployed version")
    listed.add_argument("--flow", type=_flow_name, help="only this flow's versions")
    check = versions_sub.add_parser(
        "check",
        help="exit 1, naming them, if the app to deploy drops a version flows still run on",
    )
    check.add_argument(
        "--app",
        help="the app about to be deployed, as package.module:attribute (default $RELAYFLOW_APP)",
    )
    drain = sub.add_parser(
        "drain", help="show how many flows are left on a version and wait until none is"
    )
    drain.add_argument("--flow", type=_flow_name, required=True, help="flow name")
    drain.add_argument("--version", type=_version, required=True, help="the version to drain")
    drain.add_argument(
        "--timeout-s", type=_positive, default=1800.0, help="give up (exit 1) after this long"
    )
    drain.add_argument(
        "--interval-s", type=_positive, default=5.0, help="how often to count (default 5)"
    )


def _register_tools(sub: Any) -> None:
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
    sub.add_parser(
        "migrate-shards",
        help="once, after upgrading: give documents an earlier release wrote their index shard",
    )
    keyset = sub.add_parser(
        "keyset",
        help="a new Tink keyset for flows' sensitive fields (RELAYFLOW_SENSITIVE_KEYSET), as JSON",
    )
    keyset.add_argument(
        "--kms-key-uri",
        type=_kms_key_uri,
        default=None,
        help="encrypt it with this Cloud KMS key (gcp-kms://projects/P/locations/L/keyRings/R/"
        "cryptoKeys/K; your credentials need cloudkms.cryptoKeyVersions.useToEncrypt); "
        "without it: cleartext, for local runs only",
    )
    graph = sub.add_parser("graph", parents=[app], help="print a flow's shape (text, or --mermaid)")
    graph.add_argument("flow", type=_flow_name, help="flow name")
    graph.add_argument("--version", type=_version, default=None, help="default: the newest")
    graph.add_argument("--mermaid", action="store_true", help="a Mermaid flowchart")
    graph.add_argument(
        "--schema",
        action="store_true",
        help="the JSON Schemas of the flow's input and output (from its models), as JSON",
    )


def _register_local(sub: Any) -> None:
    from relayflow.local import commands

    commands.register(sub)


# -- commands that talk to Google directly ---------------------------------------------------


def _settings(args: argparse.Namespace | None = None) -> Settings:
    from pydantic import ValidationError

    from relayflow.core.messages import describe
    from relayflow.settings import load_settings

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
    import socket

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
    """Publish one start message on the topic its tenant starts flows by."""
    from relayflow.cli import render
    from relayflow.cli.batch import start_topic
    from relayflow.gcp.events import Events, build_publisher

    labels = _labels(getattr(args, "label", None) or [])  # before anything is set up
    settings = _settings()
    body: dict[str, Any] = {"flow": args.flow, "input": args.input}
    if args.flow_id:
        body["flow_id"] = args.flow_id
    if args.deadline_s:
        body["deadline_s"] = args.deadline_s
    for field in ("tenant", "priority"):
        if getattr(args, field, None):
            body[field] = getattr(args, field)
    if labels:
        body["labels"] = labels
    events = Events(build_publisher(), project=settings.project_id)
    topic = start_topic(body.get("tenant"))
    message_id = render.text(events.publish(topic, body))
    print(f"published message {message_id} on {topic}; flow id {args.flow_id or message_id}")
    return 0


def cmd_watch(args: argparse.Namespace) -> int:
    """Follow a flow through a Firestore listener: each new history entry as it lands, and,
    between a poll chain's writes, the polls it carries (read from its task, as the api's
    ``polls_in_flight``), marked as not yet written."""
    from relayflow.cli import render
    from relayflow.cli.follow import Follower
    from relayflow.core.engine.chains import in_flight
    from relayflow.core.records import FlowRecord, flow_key
    from relayflow.gcp import queue
    from relayflow.gcp.store import FlowStore, build_client
    from relayflow.runtime import task_targets
    from relayflow.topology import load_topology

    settings = _settings()
    topology = load_topology()
    names = topology.firestore
    flow_store = FlowStore(
        build_client(settings), flows=names.flows_collection, rejected=names.rejected_collection
    )
    tasks = queue.TaskQueue(
        queue.build_client(settings),
        project=settings.project_id,
        location=settings.location,
        targets=task_targets(settings, topology),
        service_account=settings.tasks_service_account,
    )
    key = flow_key(args.tenant, args.flow_id)  # ids are each tenant's own
    ref = flow_store.reference(key)  # the store names the document (its id is spread)
    ended = threading.Event()
    follower = Follower()
    latest: list[FlowRecord] = []

    def on_snapshot(docs: list[Any], *_: object) -> None:
        for doc in docs:
            if not doc.exists:
                print(f"waiting for flow {args.flow_id} to exist…", flush=True)
                continue
            parsed = FlowRecord.from_doc(doc.to_dict() or {})
            latest[:] = [parsed]
            record = parsed.model_dump(mode="json")
            for line in follower.document(record):
                print(line, flush=True)
            if record["status"] in render.TERMINAL:
                print(render.flow(record).split("history:")[0], flush=True)
                ended.set()

    def show_in_flight() -> None:
        if latest:
            carried = in_flight(tasks, latest[0], settings.poll_chain)
            for line in follower.polls_in_flight([e.model_dump(mode="json") for e in carried]):
                print(line, flush=True)

    watch = ref.on_snapshot(on_snapshot)
    try:
        finished = _wait_calling(ended, args.timeout_s, show_in_flight)
    finally:
        watch.unsubscribe()
    if not finished:
        print(f"flow {args.flow_id} still running after {args.timeout_s:.0f}s", file=sys.stderr)
        return 1
    return 0


def _wait_calling(ended: threading.Event, timeout_s: float, each: Callable[[], None]) -> bool:
    """Wait for ``ended`` for at most ``timeout_s``, calling ``each`` every ``WATCH_CHAIN_S``;
    whether it was set."""
    deadline = time.monotonic() + timeout_s
    while not ended.wait(min(WATCH_CHAIN_S, max(0.0, deadline - time.monotonic()))):
        if time.monotonic() >= deadline:
            return False
        each()
    return True


def cmd_demo(args: argparse.Namespace) -> int:
    from relayflow.cli.demo import run_demo

    return run_demo(_settings(args), flows=args.flows, timeout_s=args.timeout_s)


def cmd_sweep(args: argparse.Namespace) -> int:
    from relayflow.cli import render
    from relayflow.runtime import build_runtime

    settings = _settings(args)
    report = build_runtime(settings).engine.sweep(grace_s=settings.sweep_grace_s)
    print(render.as_json(report.__dict__, indent=None))
    return 0


def cmd_migrate_shards(args: argparse.Namespace) -> int:
    """Give every flow, lane and rejected record that lacks a ``shard`` its shard, so the
    sweeper, listings and admission (which ask each shard) see it; safe to run again."""
    from relayflow.cli import render
    from relayflow.gcp.store import FlowStore, build_client
    from relayflow.topology import load_topology

    settings = _settings()
    names = load_topology().firestore
    store = FlowStore(
        build_client(settings),
        flows=names.flows_collection,
        rejected=names.rejected_collection,
        lanes=names.lanes_collection,
        shards=settings.firestore_shards,
    )

    def progress(collection: str, scanned: int, sharded: int) -> None:
        print(f"{collection}: {scanned} read, {sharded} given a shard", file=sys.stderr, flush=True)

    report = store.give_shards(progress=progress)
    print(render.as_json({"scanned": report.scanned, "sharded": report.sharded}, indent=None))
    return 0


def cmd_keyset(args: argparse.Namespace) -> int:
    """Print a fresh AES256-SIV keyset (encrypted by ``--kms-key-uri`` when given)."""
    from relayflow.gcp.sealer import new_keyset

    print(new_keyset(key_uri=args.kms_key_uri))
    return 0


def cmd_graph(args: argparse.Namespace) -> int:
    """Print a flow's shape; reads the app only (no emulator, no cloud)."""
    from relayflow.app import load_registry
    from relayflow.cli import shapes

    settings = _app_settings(args)
    registry = load_registry(settings.app, settings)
    flow = registry.get(args.flow, args.version)
    if args.schema:
        from relayflow.core.definitions import definition

        newest = flow.version == registry.versions(flow.name)[-1]
        print(json.dumps(definition(flow, newest=newest), indent=2))
        return 0
    print(shapes.render(flow, mermaid=args.mermaid))
    for line in shapes.scheduled(registry.schedules, flow.name, mermaid=args.mermaid):
        print(line)
    return 0


def _app_settings(args: argparse.Namespace) -> Settings:
    from pydantic import ValidationError

    from relayflow.core.messages import describe
    from relayflow.settings import load_settings

    app = getattr(args, "app", None)
    if app and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # a team's package, as `python -m` would find it
    try:
        return load_settings(**({"app": app} if app else {}))
    except ValidationError as exc:
        raise UsageError(f"bad configuration: {describe(exc)}") from None


def cmd_versions(args: argparse.Namespace) -> int:
    """``versions list``, or ``versions check`` against the app ``--app`` names (loaded here,
    as ``graph`` loads it: no emulator, no cloud)."""
    from relayflow.cli import versions

    if args.versions_action == "list":
        return versions.cmd_list(args)
    from relayflow.app import load_registry

    settings = _app_settings(args)
    return versions.cmd_check(load_registry(settings.app, settings), settings.app)


def cmd_drain(args: argparse.Namespace) -> int:
    from relayflow.cli import versions

    return versions.cmd_drain(args)


def _operation(name: str) -> Callable[[argparse.Namespace], int]:
    """A command of relayflow.cli.operate, imported when it runs."""

    def run(args: argparse.Namespace) -> int:
        from relayflow.cli import operate

        handler: Callable[[argparse.Namespace], int] = getattr(operate, name)
        return handler(args)

    return run


def _bulk_command(args: argparse.Namespace) -> int:
    from relayflow.cli.bulk import cmd_bulk

    return cmd_bulk(args)


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "publish": cmd_publish,
    "watch": cmd_watch,
    "demo": cmd_demo,
    "sweep": cmd_sweep,
    "migrate-shards": cmd_migrate_shards,
    "graph": cmd_graph,
    "keyset": cmd_keyset,
    "status": _operation("cmd_status"),
    "list": _operation("cmd_list"),
    "cancel": _operation("cmd_cancel"),
    "retry": _operation("cmd_retry"),
    "undo": _operation("cmd_undo"),
    "reset": _operation("cmd_reset"),
    "tenants": _operation("cmd_tenants"),
    "schedules": _operation("cmd_schedules"),
    "signal": _operation("cmd_signal"),
    "breakers": _operation("cmd_breakers"),
    "rejected": _operation("cmd_rejected"),
    "dead-letters": _operation("cmd_dead_letters"),
    "bulk": _bulk_command,
    "versions": cmd_versions,
    "drain": cmd_drain,
}


def main(argv: Sequence[str] | None = None) -> int:
    from relayflow.cli import render

    args = build_parser().parse_args(argv)
    handler = COMMANDS.get(args.command) or args.handler
    # Whatever a command prints, no escape sequence from its data reaches the terminal.
    with render.guarded():
        try:
            code: int = handler(args)
        except KeyboardInterrupt:
            return 130
        except Exception as exc:
            return _failed(args.command, exc)
    return code


def _failed(command: str, exc: Exception) -> int:
    """Print why ``command`` failed; its exit status (2: the command line or the environment
    needs fixing, 1: the call failed). Anything else is a bug, raised with its traceback."""
    from relayflow.cli import render
    from relayflow.cli.api import ApiError, ApiUnreachable
    from relayflow.cli.versions import VersionsUnavailable
    from relayflow.core.errors import ConfigError, UnknownFlow

    # An error's message may quote data (an api's refusal, a Google error's detail).
    usage = UsageError | ConfigError | ApiUnreachable | UnknownFlow | VersionsUnavailable
    if isinstance(exc, usage):
        print(f"relayflow: {render.text(exc)}", file=sys.stderr)
        return 2
    if isinstance(exc, ApiError | TimeoutError) or _is_google_error(exc):
        print(f"relayflow {command}: {render.text(exc)}", file=sys.stderr)
        return 1
    raise exc


def _is_google_error(exc: Exception) -> bool:
    from google.api_core.exceptions import GoogleAPIError

    return isinstance(exc, GoogleAPIError)


if __name__ == "__main__":
    sys.exit(main())

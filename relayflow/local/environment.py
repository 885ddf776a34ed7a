"""The environment of the local stack: what relayflow processes, clients and gcloud need.

Built as dicts and handed to subprocesses; the current process's ``os.environ`` is never changed.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from pathlib import Path

from relayflow.local.names import DEFAULT_STATE_DIR
from relayflow.local.ports import HOST, Ports

PROJECT_ID = "relayflow-local"
# The payload offload bucket the storage emulator is started with (``core.payloads``).
OFFLOAD_BUCKET = "relayflow-local-payloads"
__all__ = [
    "DEFAULT_STATE_DIR",
    "OFFLOAD_BUCKET",
    "PROJECT_ID",
    "child_env",
    "relayflow_env",
    "write_env_file",
]
# Loopback traffic must never go through a developer's proxy (gRPC honours http_proxy too).
_NO_PROXY = "127.0.0.1,localhost"
KEYSET_FILE = "RELAYFLOW_SENSITIVE_KEYSET_FILE"
# A keyset the caller's environment names, left out when the stack names its own.
_OTHER_KEYSETS = ("RELAYFLOW_SENSITIVE_KEYSET", "RELAYFLOW_SENSITIVE_KEY_URI")


def relayflow_env(
    ports: Ports,
    app: str | None = None,
    queue_shards: int | None = None,
    keyset: Path | None = None,
) -> dict[str, str]:
    """Variables a relayflow process or a client of the local stack reads (see settings.py).

    ``app`` (a ``RELAYFLOW_APP`` target) and ``queue_shards`` (``RELAYFLOW_QUEUE_SHARDS``: the
    queues the stack provisioned of each kind) are set only when given: unset, every process
    runs the default app on topology.json's shards. ``keyset``: the stack's cleartext keyset
    of flows' sensitive fields (``RELAYFLOW_SENSITIVE_KEYSET_FILE``).
    """
    return {
        **({"RELAYFLOW_APP": app} if app else {}),
        **({"RELAYFLOW_QUEUE_SHARDS": str(queue_shards)} if queue_shards else {}),
        **({KEYSET_FILE: str(keyset)} if keyset else {}),
        "PUBSUB_EMULATOR_HOST": f"{HOST}:{ports.pubsub}",
        "FIRESTORE_EMULATOR_HOST": f"{HOST}:{ports.firestore}",
        "CLOUD_TASKS_EMULATOR_HOST": f"{HOST}:{ports.cloud_tasks_grpc}",
        # google-cloud-storage reads this one as a URL.
        "STORAGE_EMULATOR_HOST": f"http://{HOST}:{ports.storage}",
        "RELAYFLOW_OFFLOAD_BUCKET": OFFLOAD_BUCKET,
        "GOOGLE_CLOUD_PROJECT": PROJECT_ID,
        "RELAYFLOW_PROJECT_ID": PROJECT_ID,
        "RELAYFLOW_WORKER_URL": f"http://{HOST}:{ports.worker}",
        "RELAYFLOW_POLLER_URL": f"http://{HOST}:{ports.poller}",
        "RELAYFLOW_CLIENT_API_URL": f"http://{HOST}:{ports.client_api}",
        # The example app's own setting (examples/orders), pointed at its fake dependencies.
        "ORDERS_API_URL": f"http://{HOST}:{ports.orders_api}",
        "RELAYFLOW_OIDC_CERTS_URL": f"http://{HOST}:{ports.cloud_tasks_rest}/oauth2/v1/certs",
        "RELAYFLOW_VERIFY_TOKENS": "true",
        # The api (and its console, and the CLI's operator commands) on 127.0.0.1: open to
        # this machine only, as "local"; tasks are still verified.
        "RELAYFLOW_API_URL": f"http://{HOST}:{ports.api}",
        "RELAYFLOW_API_VERIFY_TOKENS": "false",
    }


def gcloud_env(ports: Ports) -> dict[str, str]:
    """Variables that point the gcloud CLI at the emulators (for the sourced env file)."""
    return {
        "CLOUDSDK_API_ENDPOINT_OVERRIDES_PUBSUB": f"http://{HOST}:{ports.pubsub}/",
        "CLOUDSDK_API_ENDPOINT_OVERRIDES_CLOUDTASKS": f"http://{HOST}:{ports.cloud_tasks_rest}/",
        "CLOUDSDK_AUTH_DISABLE_CREDENTIALS": "true",
        "CLOUDSDK_CORE_PROJECT": PROJECT_ID,
    }


def child_env(
    base: Mapping[str, str],
    ports: Ports,
    *,
    app: str | None = None,
    app_path: Path | None = None,
    queue_shards: int | None = None,
    keyset: Path | None = None,
) -> dict[str, str]:
    """A component's environment: the caller's, overridden by the stack's own variables.

    ``app_path`` (the directory ``relayflow local up`` ran in) goes first on PYTHONPATH, so a
    team's package is importable by the services without being installed, as ``python -m``
    and Celery's ``-A`` find it.
    """
    no_proxy = ",".join(v for v in (base.get("NO_PROXY"), _NO_PROXY) if v)
    python_path = [str(app_path)] if app_path else []
    python_path += [p for p in (base.get("PYTHONPATH") or "").split(os.pathsep) if p]
    if keyset is not None:
        base = {k: v for k, v in base.items() if k not in _OTHER_KEYSETS}
    return {
        **base,
        **relayflow_env(ports, app, queue_shards, keyset),
        **({"PYTHONPATH": os.pathsep.join(python_path)} if python_path else {}),
        "NO_PROXY": no_proxy,
        "no_proxy": no_proxy,
        "PYTHONUNBUFFERED": "1",  # logs reach the log file as they happen
    }


def write_env_file(
    path: Path, variables: Mapping[str, str], *, path_prepend: Path | None = None
) -> None:
    """``export VAR=value`` lines that a POSIX shell can ``source``.

    ``path_prepend`` (the venv's bin) goes in front of ``$PATH``, so ``relayflow`` and the
    tools it installed are found in that shell without activating the venv.
    """
    lines = [f"export {name}={shlex.quote(value)}" for name, value in sorted(variables.items())]
    if path_prepend is not None:
        lines.append(f'export PATH={shlex.quote(str(path_prepend))}:"$PATH"')
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")

"""Helpers for tests that run against the emulator: start/stop it, and a recording HTTP target.

    with EmulatorProcess.start() as emulator:
        client = emulator.grpc_client()
        ...

Both are usable from any test suite in this repo (not only the emulator's own).
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

from relayflow.local.polling import poll_until

_REPO_ROOT = Path(__file__).resolve().parents[3]  # where `relayflow` is importable from


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct free ports: every socket stays bound until all are picked, because the
    kernel may hand a just-released port out again (two calls to a one-port helper once gave the
    emulator the same port for gRPC and REST, and it failed to start)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind((host, 0))
        return [int(sock.getsockname()[1]) for sock in sockets]


@dataclass
class EmulatorProcess:
    """A running `python -m relayflow.emulators.cloud_tasks`, stopped by PID with SIGTERM."""

    process: subprocess.Popen[bytes]
    host: str
    port: int
    rest_port: int
    log_path: Path

    @classmethod
    def start(
        cls,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        rest_port: int | None = None,
        args: Sequence[str] = (),
        log_path: Path | None = None,
        timeout_s: float = 20.0,
    ) -> EmulatorProcess:
        picked = free_ports(2, host)
        port = port or picked[0]
        rest_port = rest_port or next(p for p in picked if p != port)
        log_path = log_path or Path(os.devnull)
        command = [
            sys.executable, "-m", "relayflow.emulators.cloud_tasks",
            "--host", host, "--port", str(port), "--rest-port", str(rest_port), *args,
        ]  # fmt: skip
        with log_path.open("ab") as log:
            process = subprocess.Popen(command, cwd=_REPO_ROOT, stdout=log, stderr=log)
        emulator = cls(process, host, port, rest_port, log_path)
        emulator.wait_healthy(timeout_s)
        return emulator

    @property
    def grpc_target(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def rest_url(self) -> str:
        return f"http://{self.host}:{self.rest_port}"

    @property
    def certs_url(self) -> str:
        return f"{self.rest_url}/oauth2/v1/certs"

    def wait_healthy(self, timeout_s: float) -> None:
        if not poll_until(self._healthy, timeout_s=timeout_s, interval_s=0.05):
            raise TimeoutError("emulator did not become healthy")

    def _healthy(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"emulator exited with {self.process.returncode}")
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(f"{self.rest_url}/healthz", timeout=1) as response,
        ):
            return bool(response.status == 200)
        return False

    def stop(self, timeout_s: float = 20.0) -> int:
        """SIGTERM the process (by PID) and return its exit code."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
        return self.process.wait(timeout_s)

    def grpc_client(self) -> Any:
        """A CloudTasksClient over an insecure gRPC channel."""
        import grpc
        from google.cloud import tasks_v2
        from google.cloud.tasks_v2.services.cloud_tasks.transports import CloudTasksGrpcTransport

        channel = grpc.insecure_channel(self.grpc_target)
        return tasks_v2.CloudTasksClient(transport=CloudTasksGrpcTransport(channel=channel))

    def rest_client(self) -> Any:
        """A CloudTasksClient over the REST transport (http://, anonymous credentials)."""
        from google.api_core.client_options import ClientOptions
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import tasks_v2

        return tasks_v2.CloudTasksClient(
            transport="rest",
            client_options=ClientOptions(api_endpoint=self.rest_url),
            credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
        )

    def __enter__(self) -> EmulatorProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


@dataclass(frozen=True)
class Reply:
    """How the target answers one request."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass(frozen=True)
class Hit:
    """One request the target received."""

    at: float  # time.time() on arrival
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class RecordingTarget:
    """A local HTTP server that records every request and answers as scripted per path."""

    def __init__(self) -> None:
        self.hits: queue.Queue[Hit] = queue.Queue()
        self._scripts: dict[str, list[Reply]] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def url(self, path: str) -> str:
        return self.base_url + path

    def script(self, path: str, replies: Sequence[Reply]) -> None:
        """Answer requests to `path` with these replies in turn; the last one repeats."""
        with self._lock:
            self._scripts[path] = list(replies)

    def next_hit(self, timeout_s: float = 5.0) -> Hit:
        return self.hits.get(timeout=timeout_s)

    def hits_for(self, path: str, count: int, timeout_s: float = 10.0) -> list[Hit]:
        """The next `count` requests to `path` (others received meanwhile are dropped)."""
        deadline = time.monotonic() + timeout_s
        found: list[Hit] = []
        while len(found) < count:
            hit = self.hits.get(timeout=max(0.001, deadline - time.monotonic()))
            if hit.path == path:
                found.append(hit)
        return found

    def no_hit_within(self, timeout_s: float) -> bool:
        try:
            self.hits.get(timeout=timeout_s)
        except queue.Empty:
            return True
        return False

    def close(self) -> None:
        self._closed.set()
        self._server.shutdown()
        self._server.server_close()

    def _reply_for(self, path: str) -> Reply:
        with self._lock:
            replies = self._scripts.get(path)
            if not replies:
                return Reply()
            return replies.pop(0) if len(replies) > 1 else replies[0]

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        target = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self) -> None:
                at = time.time()
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                path = self.path.split("?", 1)[0]
                target.hits.put(Hit(at, self.command, path, dict(self.headers.items()), body))
                reply = target._reply_for(path)
                # The slow answer is the script's fault; closing the target cuts it short.
                target._closed.wait(reply.delay_s)
                self.send_response(reply.status)
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _handle

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


@contextlib.contextmanager
def recording_target() -> Iterator[RecordingTarget]:
    target = RecordingTarget()
    try:
        yield target
    finally:
        target.close()

"""The emulator's settings, built once from the command line."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything `python -m relayflow.emulators.cloud_tasks` can be told."""

    host: str = "127.0.0.1"
    port: int = 8123
    rest_port: int = 8124
    data_dir: Path | None = None
    tombstone_window_s: float = 86_400.0
    duplicate_rate: float = 0.0
    seed: int | None = None
    shutdown_grace_s: float = 10.0
    log_level: str = "INFO"


def parse_args(argv: Sequence[str] | None = None) -> Settings:
    parser = argparse.ArgumentParser(
        prog="python -m relayflow.emulators.cloud_tasks",
        description="A Cloud Tasks v2 emulator: gRPC and REST front doors, real dispatch.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (only this one)")
    parser.add_argument("--port", type=int, default=8123, help="gRPC port")
    parser.add_argument("--rest-port", type=int, default=8124, help="REST/JSON, /healthz, /stats")
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="persist queues, tasks, tombstones here"
    )
    parser.add_argument(
        "--tombstone-window-s",
        type=float,
        default=86_400.0,
        help="how long a task name stays reserved after it ran or was deleted (default 86400)",
    )
    parser.add_argument(
        "--duplicate-rate",
        type=float,
        default=0.0,
        help="probability of delivering an attempt a second time (default 0)",
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="seed for generated names/duplicates"
    )
    parser.add_argument(
        "--shutdown-grace-s",
        type=float,
        default=10.0,
        help="on SIGTERM, wait this long for in-flight attempts before recording them as failed",
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    args = parser.parse_args(argv)
    if not 0.0 <= args.duplicate_rate <= 1.0:
        parser.error("--duplicate-rate must be between 0 and 1")
    return Settings(
        host=args.host,
        port=args.port,
        rest_port=args.rest_port,
        data_dir=args.data_dir,
        tombstone_window_s=args.tombstone_window_s,
        duplicate_rate=args.duplicate_rate,
        seed=args.seed,
        shutdown_grace_s=args.shutdown_grace_s,
        log_level=args.log_level.upper(),
    )

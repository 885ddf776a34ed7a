"""Wires the engine to its front doors and runs them until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal

import aiohttp
from aiohttp import web

from relayflow.emulators.cloud_tasks import grpc_api
from relayflow.emulators.cloud_tasks.clock import SystemClock, seconds_to_us
from relayflow.emulators.cloud_tasks.dispatch import Dispatcher
from relayflow.emulators.cloud_tasks.engine import Engine, EngineSettings
from relayflow.emulators.cloud_tasks.oidc import TokenIssuer
from relayflow.emulators.cloud_tasks.rest_api import RestApi
from relayflow.emulators.cloud_tasks.settings import Settings
from relayflow.emulators.cloud_tasks.stats import Stats
from relayflow.emulators.cloud_tasks.store import MemoryStore, SqliteStore, Store

log = logging.getLogger(__name__)


def _store(settings: Settings) -> Store:
    if settings.data_dir is None:
        return MemoryStore()
    return SqliteStore(settings.data_dir)


def _issuer(settings: Settings) -> TokenIssuer:
    if settings.data_dir is None:
        return TokenIssuer.generate()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    return TokenIssuer.load_or_create(settings.data_dir)


def _tune_gc() -> None:
    """Keep collector pauses out of dispatch lag.

    Task records hold no reference cycles, so frequent full collections only re-scan the
    (possibly 100,000) live tasks: freeze what startup loaded and collect young objects less
    often.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


async def serve(settings: Settings) -> None:
    """Run the emulator until a stop signal; then drain, persist and return."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    issuer = _issuer(settings)
    clock = SystemClock()
    # No connection cap: max_concurrent_dispatches is enforced per queue by the engine.
    connector = aiohttp.TCPConnector(limit=0)
    # Cloud Tasks keeps no cookies and sends no Accept headers of its own; skipping them
    # also trims per-request work.
    session = aiohttp.ClientSession(
        connector=connector,
        cookie_jar=aiohttp.DummyCookieJar(),
        auto_decompress=False,
        skip_auto_headers=("Accept", "Accept-Encoding"),
    )
    async with session:
        engine = Engine(
            clock=clock,
            store=_store(settings),
            dispatcher=Dispatcher(session, issuer, clock),
            stats=Stats(),
            settings=EngineSettings(
                tombstone_window_us=seconds_to_us(settings.tombstone_window_s),
                duplicate_rate=settings.duplicate_rate,
                seed=settings.seed,
            ),
        )
        await engine.start()
        _tune_gc()
        grpc_server = await grpc_api.start_server(engine, host=settings.host, port=settings.port)
        runner = web.AppRunner(RestApi(engine, issuer).app(), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, settings.host, settings.rest_port).start()
        log.info(
            "Cloud Tasks emulator: gRPC %s:%d, REST http://%s:%d",
            settings.host,
            settings.port,
            settings.host,
            settings.rest_port,
        )
        await stop.wait()
        log.info("stopping")
        await grpc_server.stop(grace=1.0)
        await runner.cleanup()
        await engine.stop(grace_s=settings.shutdown_grace_s)
    log.info("stopped")

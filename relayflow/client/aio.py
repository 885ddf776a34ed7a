"""``relayflow.AsyncClient``: the asyncio twin of ``Client``.

Honestly a wrapper: each call that does I/O (a publish, an api call, the one read a wait may
make) runs the sync client's code in a thread (``asyncio.to_thread``). Waiting holds no
thread: ``result()`` awaits the waiter table's future, which the results subscription's
thread resolves, so 1,000 handles awaited at once cost 1,000 small futures, not 1,000
threads. With ``wait="api"`` each long-poll is a call and takes a thread while it lasts.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Iterable, Mapping
from typing import Any

from relayflow.client.sync import Client, FlowHandle, Start
from relayflow.client.views import CallbackOutcome, FlowFailed, FlowPage, FlowStatus
from relayflow.client.waiters import FlowResult


class AsyncFlowHandle:
    """A ``FlowHandle`` whose calls are awaited."""

    def __init__(self, handle: FlowHandle) -> None:
        self.sync = handle

    def __repr__(self) -> str:
        return f"AsyncFlowHandle({self.flow_id!r}, tenant={self.tenant!r})"

    @property
    def flow_id(self) -> str:
        return self.sync.flow_id

    @property
    def tenant(self) -> str:
        return self.sync.tenant

    async def status(self) -> FlowStatus:
        return await asyncio.to_thread(self.sync.status)

    async def wait(self, timeout: float | None = None) -> FlowResult:
        client = self.sync.client
        if client.wait_mode == "api":
            return await asyncio.to_thread(client.wait, self.sync, timeout)
        future = await asyncio.to_thread(client.register, self.sync)
        try:
            return await asyncio.wait_for(_awaitable(future), timeout)
        except TimeoutError:
            raise await asyncio.to_thread(client.timed_out, self.sync, timeout) from None
        finally:
            client.release(self.sync)

    async def result(self, timeout: float | None = None) -> Any:
        """As ``FlowHandle.result``: the output (typed by the flow's ``output_model`` when
        the client has the registry), or ``FlowFailed``."""
        ended = await self.wait(timeout)
        if not ended.succeeded:
            raise FlowFailed(ended)
        return self.sync.client.output_of(ended)

    async def cancel(self, reason: str) -> FlowStatus:
        return await asyncio.to_thread(self.sync.cancel, reason)

    async def retry(self, reason: str) -> FlowStatus:
        return await asyncio.to_thread(self.sync.retry, reason)

    async def reset(self, step: str, reason: str, *, undo: bool = True) -> FlowStatus:
        return await asyncio.to_thread(self.sync.reset, step, reason, undo=undo)

    async def preview_reset(self, step: str, *, undo: bool = True) -> dict[str, Any]:
        return await asyncio.to_thread(self.sync.preview_reset, step, undo=undo)

    async def signal(
        self, name: str, data: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        return await asyncio.to_thread(self.sync.signal, name, data, **kwargs)


class AsyncClient:
    """``Client``'s calls, awaited; takes the same arguments (``AsyncClient(wait="api")``)."""

    def __init__(self, **kwargs: Any) -> None:
        self.sync = Client(**kwargs)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        await asyncio.to_thread(self.sync.close)

    async def listen(self) -> None:
        await asyncio.to_thread(self.sync.listen)

    async def start(self, flow: str, input: Mapping[str, Any], **kwargs: Any) -> AsyncFlowHandle:
        handle = await asyncio.to_thread(self.sync.start, flow, input, **kwargs)
        return AsyncFlowHandle(handle)

    async def start_many(self, starts: Iterable[Start]) -> list[AsyncFlowHandle]:
        handles = await asyncio.to_thread(self.sync.start_many, list(starts))
        return [AsyncFlowHandle(h) for h in handles]

    def get(self, flow_id: str, *, tenant: str | None = None) -> AsyncFlowHandle:
        return AsyncFlowHandle(self.sync.get(flow_id, tenant=tenant))

    async def list(self, **kwargs: Any) -> FlowPage:
        return await asyncio.to_thread(lambda: self.sync.list(**kwargs))

    async def complete_callback(
        self,
        token: str,
        *,
        output: Mapping[str, Any] | None = None,
        error: Mapping[str, Any] | None = None,
    ) -> CallbackOutcome:
        return await asyncio.to_thread(
            lambda: self.sync.complete_callback(token, output=output, error=error)
        )


def _awaitable(future: concurrent.futures.Future[FlowResult]) -> asyncio.Future[FlowResult]:
    """An asyncio future that follows ``future`` one way: cancelling it (a timeout) leaves
    ``future`` alone, which other waiters of the same flow share."""
    loop = asyncio.get_running_loop()
    mirror: asyncio.Future[FlowResult] = loop.create_future()

    def copy(done: concurrent.futures.Future[FlowResult]) -> None:
        if not mirror.done():
            mirror.set_result(done.result())

    def wake(done: concurrent.futures.Future[FlowResult]) -> None:
        if not loop.is_closed():  # a result after the awaiting loop ended has no one to wake
            loop.call_soon_threadsafe(copy, done)

    future.add_done_callback(wake)
    return mirror

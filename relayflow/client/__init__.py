"""The client of relayflow: start flows from a service and wait for their results.

``Client`` (sync) and ``AsyncClient`` (asyncio) start flows and hand back handles whose
``result()`` waits without polling; see ``relayflow.client.sync`` for how.
"""

from __future__ import annotations

from relayflow.client.aio import AsyncClient, AsyncFlowHandle
from relayflow.client.sync import Client, FlowHandle, Start, StartManyFailed
from relayflow.client.transport import ApiError, ApiUnreachable
from relayflow.client.views import CallbackOutcome, FlowFailed, FlowPage, FlowStatus, WaitTimeout
from relayflow.client.waiters import FlowResult
from relayflow.core.errors import InvalidMessage

__all__ = [
    "ApiError",
    "ApiUnreachable",
    "AsyncClient",
    "AsyncFlowHandle",
    "CallbackOutcome",
    "Client",
    "FlowFailed",
    "FlowHandle",
    "FlowPage",
    "FlowResult",
    "FlowStatus",
    "InvalidMessage",
    "Start",
    "StartManyFailed",
    "WaitTimeout",
]

"""relayflow: multi-step flows on Google Cloud, where no worker ever sleeps while it waits.

What a flow author needs is imported from here, and only from here::

    from relayflow import ActionStep, Flow, NotReady, PollStep, Registry, StepContext

(``Sensitive`` marks a model's field whose values are sealed before they are stored:
``card: Annotated[str, Sensitive]``), and what a service that starts flows needs
(``relayflow.client``)::

    from relayflow import AsyncClient, Client, FlowFailed, FlowHandle, WaitTimeout

Everything else (``relayflow.core``, ``relayflow.gcp``, ``relayflow.web``, ...) may change
between releases. ``relayflow.testing`` is public too: it runs flows in memory for tests.

Names are loaded on first use, so that importing a subpackage (the CLI printing its help,
say) does not pay for the whole library.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from relayflow.client import AsyncClient, Client, FlowFailed, FlowHandle, WaitTimeout
    from relayflow.core.backoff import Jitter
    from relayflow.core.breaker_policy import BreakerPolicy, Dependencies
    from relayflow.core.errors import (
        ConfigError,
        NotReady,
        PermanentError,
        RelayflowError,
        RetryableError,
        StepError,
    )
    from relayflow.core.flows import (
        ActionStep,
        CallbackStep,
        ChildFlow,
        Flow,
        ForEach,
        Handler,
        IfStep,
        PollPolicy,
        PollStep,
        Registry,
        RetryPolicy,
        Sleep,
        StepContext,
        WaitForSignal,
    )
    from relayflow.core.schedules import CatchUp, Overlap, Schedule
    from relayflow.core.sensitive import Sensitive
    from relayflow.core.tenants import TenantPolicy, Tenants
    from relayflow.http import call_json, raise_for_response
    from relayflow.settings import Settings

_EXPORTS = {
    "ActionStep": "relayflow.core.flows",
    "CallbackStep": "relayflow.core.flows",
    "ChildFlow": "relayflow.core.flows",
    "ForEach": "relayflow.core.flows",
    "IfStep": "relayflow.core.flows",
    "Flow": "relayflow.core.flows",
    "Handler": "relayflow.core.flows",
    "PollPolicy": "relayflow.core.flows",
    "PollStep": "relayflow.core.flows",
    "Registry": "relayflow.core.flows",
    "RetryPolicy": "relayflow.core.flows",
    "Sleep": "relayflow.core.flows",
    "StepContext": "relayflow.core.flows",
    "WaitForSignal": "relayflow.core.flows",
    "Jitter": "relayflow.core.backoff",
    "BreakerPolicy": "relayflow.core.breaker_policy",
    "Dependencies": "relayflow.core.breaker_policy",
    "TenantPolicy": "relayflow.core.tenants",
    "Tenants": "relayflow.core.tenants",
    "ConfigError": "relayflow.core.errors",
    "NotReady": "relayflow.core.errors",
    "PermanentError": "relayflow.core.errors",
    "RelayflowError": "relayflow.core.errors",
    "RetryableError": "relayflow.core.errors",
    "StepError": "relayflow.core.errors",
    "call_json": "relayflow.http",
    "raise_for_response": "relayflow.http",
    "Settings": "relayflow.settings",
    "AsyncClient": "relayflow.client",
    "Client": "relayflow.client",
    "FlowFailed": "relayflow.client",
    "FlowHandle": "relayflow.client",
    "WaitTimeout": "relayflow.client",
    "Schedule": "relayflow.core.schedules",
    "Overlap": "relayflow.core.schedules",
    "CatchUp": "relayflow.core.schedules",
    "Sensitive": "relayflow.core.sensitive",
}

__all__ = [
    "ActionStep",
    "AsyncClient",
    "BreakerPolicy",
    "CallbackStep",
    "CatchUp",
    "ChildFlow",
    "Client",
    "ConfigError",
    "Dependencies",
    "Flow",
    "FlowFailed",
    "FlowHandle",
    "ForEach",
    "Handler",
    "IfStep",
    "Jitter",
    "NotReady",
    "Overlap",
    "PermanentError",
    "PollPolicy",
    "PollStep",
    "Registry",
    "RelayflowError",
    "RetryPolicy",
    "RetryableError",
    "Schedule",
    "Sensitive",
    "Settings",
    "Sleep",
    "StepContext",
    "StepError",
    "TenantPolicy",
    "Tenants",
    "WaitForSignal",
    "WaitTimeout",
    "call_json",
    "raise_for_response",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'relayflow' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once loaded, a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])

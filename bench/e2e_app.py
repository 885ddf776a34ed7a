"""The app of the end-to-end tests' second stack (``bench_stack`` in tests/e2e/conftest.py):
the flows of bench/children_app.py and bench/offload_app.py on one stack, so neither costs a
stack of its own."""

from __future__ import annotations

from children_app import registry as children
from offload_app import FLOWS as OFFLOAD_FLOWS

from relayflow import Registry

registry = Registry(
    [*(children.get(name) for name in ("payment", "order", "batch")), *OFFLOAD_FLOWS]
)

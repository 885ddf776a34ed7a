"""The ``h`` fixture: a fresh engine harness per test."""

from __future__ import annotations

import pytest

from .support import Harness


@pytest.fixture
def h() -> Harness:
    return Harness()

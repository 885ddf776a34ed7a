"""Session fixtures: real emulators (and the whole local stack) started once, wiped per test.

- ``emulators``: Pub/Sub + Firestore + Cloud Tasks emulators, base port 18120, provisioned.
- ``local_stack``: every component (emulators, fake client API, function, services), base 18220.
- ``clean_firestore``: wipes the Firestore emulator of the stack the test uses, before the test.
- ``emulator_env``: the stack's variables in ``os.environ`` for one test (restored after it),
  for Google clients that only read ``*_EMULATOR_HOST`` from the environment.

Each stack lives in its own tmp state dir; ``down()`` runs in a finalizer, so a failing test
never leaves processes behind.

Port blocks (10 ports each) as offsets from ``test_base_port`` (``RELAYFLOW_TEST_BASE_PORT``,
default 18120; move it when two test runs share a machine): +0 ``emulators``, +100
``local_stack``, +200 tests/e2e, +300 and +400 the stack lifecycle tests in tests/local, +500
tests/e2e/test_duplicates and tests/project, +600 and +650 tests/chaos (two runs side by
side), +700 tests/console (the console in a browser), +800 tests/e2e/test_sleep (a stack
running bench/sleep_app.py), +900 tests/client, +1100 tests/e2e/test_schedules, +1200 the e2e
tests' ``bench_stack`` (bench/e2e_app.py: child flows and payload offload). A stack now takes 12
ports of its block (the storage emulator is base+11).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator

import pytest

from relayflow.local.components import EMULATORS
from relayflow.local.ports import Ports
from relayflow.local.stack import Stack

TEST_BASE_PORT = int(os.environ.get("RELAYFLOW_TEST_BASE_PORT", "18120"))
EMULATORS_BASE_PORT = TEST_BASE_PORT
LOCAL_STACK_BASE_PORT = TEST_BASE_PORT + 100


def pytest_configure(config: pytest.Config) -> None:
    # A SIGTERM (a CI timeout, `kill`) would end pytest without running finalizers and leave
    # the stacks running; as a KeyboardInterrupt it unwinds through every fixture's down().
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, signal.default_int_handler)


def _run(stack: Stack) -> Iterator[Stack]:
    stack.up()  # on failure, up() stops whatever it had started before raising
    try:
        yield stack
    finally:
        stack.down()


@pytest.fixture(scope="session")
def test_base_port() -> int:
    """The first port of the test blocks; see the module docstring for the offsets."""
    return TEST_BASE_PORT


@pytest.fixture(scope="session")
def emulators(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The three emulators, provisioned from the topology; ``.env()`` for clients."""
    state_dir = tmp_path_factory.mktemp("emulators-stack")
    yield from _run(
        Stack(ports=Ports(EMULATORS_BASE_PORT), state_dir=state_dir, components=EMULATORS)
    )


@pytest.fixture(scope="session")
def local_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The whole local stack: emulators, fake client API, start function and the services."""
    state_dir = tmp_path_factory.mktemp("local-stack")
    yield from _run(
        Stack(ports=Ports(LOCAL_STACK_BASE_PORT), state_dir=state_dir, sweep_interval_s=0)
    )


def _stack_in_use(request: pytest.FixtureRequest) -> Stack:
    name = "local_stack" if "local_stack" in request.fixturenames else "emulators"
    stack: Stack = request.getfixturevalue(name)
    return stack


@pytest.fixture
def clean_firestore(request: pytest.FixtureRequest) -> Callable[[], None]:
    """Wipe Firestore before the test; returns the wipe so a test can call it again."""
    stack = _stack_in_use(request)
    stack.wipe_firestore()
    return stack.wipe_firestore


@pytest.fixture
def emulator_env(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Put the stack's variables into ``os.environ`` for this test only; returns them."""
    env = _stack_in_use(request).env()
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env

"""relayflow.core.flows: definitions are validated when built; the registry names what it holds."""

from __future__ import annotations

import math
from typing import Any

import pytest

from relayflow.core.backoff import Jitter
from relayflow.core.errors import ConfigError, UnknownFlow
from relayflow.core.flows import (
    ActionStep,
    Flow,
    PollPolicy,
    PollStep,
    Registry,
    RetryPolicy,
    StepContext,
)


def _noop(ctx: StepContext) -> dict[str, Any]:
    return {}


def _flow(name: str = "demo", *steps: str) -> Flow:
    return Flow(name=name, steps=tuple(ActionStep(s, _noop) for s in (steps or ("only",))))


def test_a_flow_knows_its_steps_and_its_last_one() -> None:
    flow = _flow("demo", "first", "second")
    assert flow.step(1).name == "second"
    assert not flow.is_last(0)
    assert flow.is_last(1)


@pytest.mark.parametrize(
    ("build", "mentions"),
    [
        (lambda: Flow(name="demo", steps=()), "has no steps"),
        (lambda: _flow("Demo"), "flow name 'Demo'"),
        (lambda: _flow("demo", "Bad-Step"), "Bad-Step"),
        (lambda: _flow("demo", "same", "same"), "repeats a step name"),
    ],
)
def test_an_inconsistent_flow_is_a_config_error(build: Any, mentions: str) -> None:
    with pytest.raises(ConfigError, match=None) as info:
        build()
    assert mentions in str(info.value)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"initial_s": 0.0},
        {"multiplier": 0.9},
        {"max_interval_s": 0.1},
        {"jitter": 1.0},
        {"initial_s": math.nan},
        {"max_interval_s": math.inf},
    ],
)
def test_a_bad_backoff_curve_is_a_config_error_for_both_policies(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match="backoff needs"):
        PollPolicy(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="backoff needs"):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_poll_and_retry_bounds_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="max_polls"):
        PollPolicy(max_polls=0)
    with pytest.raises(ConfigError, match="deadline_s"):
        PollPolicy(deadline_s=0)
    with pytest.raises(ConfigError, match="max_attempts"):
        RetryPolicy(max_attempts=0)


def test_policies_delegate_to_the_backoff_curve() -> None:
    poll = PollPolicy(initial_s=1, multiplier=2, max_interval_s=30, jitter_mode=Jitter.NONE)
    retry = RetryPolicy(initial_s=1, multiplier=2, max_interval_s=5, jitter=0)
    assert [poll.delay_s(n=n, key="k") for n in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    assert [retry.delay_s(retry=n, key="k") for n in range(4)] == [1, 2, 4, 5]


def test_the_registry_returns_a_flow_by_name() -> None:
    flow = _flow("demo")
    registry = Registry((flow,))
    assert registry.get("demo") is flow
    assert "demo" in registry
    assert list(registry) == [flow]


def test_an_unknown_flow_lists_the_registered_ones() -> None:
    registry = Registry((_flow("beta"), _flow("alpha")))
    with pytest.raises(UnknownFlow, match=r"unknown flow 'gamma' \(registered: alpha, beta\)"):
        registry.get("gamma")
    assert registry.names() == ["alpha", "beta"]


def test_registering_a_name_twice_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="registered twice"):
        Registry((_flow("demo"), _flow("demo")))


def test_a_poll_step_defaults_to_the_documented_deadline() -> None:
    step = PollStep("await_ready", _noop)
    assert step.policy.deadline_s == 900.0
    assert step.policy.jitter == 0.2

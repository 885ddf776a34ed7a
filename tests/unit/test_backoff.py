"""backoff: exact curves with jitter off, bounded deterministic jitter, no overflow."""

from __future__ import annotations

import math

import pytest

from relayflow.core.backoff import (
    Jitter,
    clip_to_deadline,
    compute_delay,
    nominal_delay,
    unit_interval,
)

CURVE = {"initial_s": 1.0, "multiplier": 2.0, "max_interval_s": 30.0}
KEYS = [f"flow-{i}:await_registration" for i in range(2000)]


def test_without_jitter_the_curve_doubles_then_stays_at_the_cap() -> None:
    # given initial 1 s, multiplier 2, max 30 s and no jitter
    # when the delays for tries 0..6 are computed
    delays = [compute_delay(n=n, **CURVE, mode=Jitter.NONE) for n in range(7)]
    # then they are exactly 1, 2, 4, 8, 16, then capped at 30
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


def test_proportional_jitter_of_zero_is_the_nominal_curve() -> None:
    delays = [compute_delay(n=n, **CURVE, jitter=0.0, key="k") for n in range(7)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


def test_a_multiplier_of_one_is_a_constant_delay() -> None:
    assert nominal_delay(n=10**9, initial_s=3.0, multiplier=1.0, max_interval_s=30.0) == 3.0


@pytest.mark.parametrize("n", [10_000, 10**9])
@pytest.mark.parametrize("mode", [Jitter.NONE, Jitter.PROPORTIONAL])
def test_huge_try_numbers_return_the_cap_without_overflow(n: int, mode: Jitter) -> None:
    # given a try number whose multiplier**n does not fit in a float
    # when the delay is computed
    delay = compute_delay(n=n, **CURVE, mode=mode, key="flow-1:step")
    # then it is bounded by the cap (exactly the cap without jitter) instead of raising
    if mode is Jitter.NONE:
        assert delay == 30.0
    else:
        assert 30.0 * 0.8 <= delay <= 30.0


def test_huge_try_numbers_under_full_jitter_stay_within_the_cap() -> None:
    assert 0.0 <= compute_delay(n=10**9, **CURVE, mode=Jitter.FULL, key="k") <= 30.0


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 40])
def test_proportional_jitter_stays_within_twenty_percent_and_under_the_cap(n: int) -> None:
    # given the default ±20% jitter and many different flows
    nominal = nominal_delay(n=n, **CURVE)
    # when each flow's delay for try n is computed
    delays = [compute_delay(n=n, **CURVE, key=key) for key in KEYS]
    # then every delay is inside [0.8 d, min(1.2 d, max)], and the band is actually used
    assert all(nominal * 0.8 <= d <= min(nominal * 1.2, 30.0) for d in delays)
    assert min(delays) < nominal * 0.82
    assert max(delays) > min(nominal * 1.18, 29.9)


def test_jitter_is_deterministic_for_the_same_key_and_try() -> None:
    first = compute_delay(n=3, **CURVE, key="flow-42:await_registration")
    again = compute_delay(n=3, **CURVE, key="flow-42:await_registration")
    assert first == again


def test_jitter_differs_between_flows_and_between_tries() -> None:
    # given two flows that differ only in their id
    a = compute_delay(n=3, **CURVE, key="flow-1:await_registration")
    b = compute_delay(n=3, **CURVE, key="flow-2:await_registration")
    # then their schedules differ, so they do not poll in lockstep
    assert a != b
    # and a thousand flows spread over many distinct delays
    assert len({compute_delay(n=3, **CURVE, key=k) for k in KEYS[:1000]}) == 1000


def test_full_jitter_lies_between_zero_and_the_nominal_delay() -> None:
    nominal = nominal_delay(n=4, **CURVE)
    delays = [compute_delay(n=4, **CURVE, mode=Jitter.FULL, key=k) for k in KEYS]
    assert all(0.0 <= d <= nominal for d in delays)
    assert min(delays) < nominal * 0.05
    assert max(delays) > nominal * 0.95


def test_unit_interval_is_in_zero_one_and_deterministic() -> None:
    values = [unit_interval(k) for k in KEYS]
    assert all(0.0 <= v < 1.0 for v in values)
    assert values == [unit_interval(k) for k in KEYS]


@pytest.mark.parametrize(
    ("kwargs", "mentions"),
    [
        ({"n": -1}, "n must be >= 0"),
        ({"initial_s": 0.0}, "initial_s"),
        ({"initial_s": -1.0}, "initial_s"),
        ({"multiplier": 0.5}, "multiplier"),
        ({"max_interval_s": 0.5}, "max_interval_s"),
        ({"jitter": 1.0}, "jitter must be in [0, 1)"),
        ({"jitter": -0.1}, "jitter must be in [0, 1)"),
        ({"initial_s": math.nan}, "initial_s"),
        ({"max_interval_s": math.inf}, "max_interval_s"),
    ],
)
def test_invalid_arguments_raise_value_error_naming_the_problem(
    kwargs: dict[str, float], mentions: str
) -> None:
    # given one argument out of range
    args: dict[str, float] = {"n": 0, **CURVE, **kwargs}
    # when the delay is computed, then a ValueError names the argument
    with pytest.raises(ValueError, match=None) as info:
        compute_delay(**args)  # type: ignore[arg-type]
    assert mentions in str(info.value)


def test_clip_to_deadline_keeps_a_delay_that_fits() -> None:
    assert clip_to_deadline(8.0, remaining_s=100.0) == 8.0


def test_clip_to_deadline_cuts_the_last_wait_to_land_on_the_deadline() -> None:
    assert clip_to_deadline(16.0, remaining_s=5.0) == 5.0


@pytest.mark.parametrize("remaining_s", [0.0, -3.0])
def test_clip_to_deadline_is_none_once_the_deadline_has_passed(remaining_s: float) -> None:
    assert clip_to_deadline(16.0, remaining_s=remaining_s) is None

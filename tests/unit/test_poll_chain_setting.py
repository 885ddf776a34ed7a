"""RELAYFLOW_POLL_CHAIN: how many polls run between two writes of a flow's document, read by
every component, refused with a clear error when it is not a whole number in range."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from relayflow.core.engine import Limits
from relayflow.core.position import MAX_POLL_CHAIN, POLL_CHAIN
from relayflow.runtime import limits
from relayflow.settings import load_settings
from relayflow.topology import load_topology


def test_the_default_is_chains_of_20_and_the_setting_reaches_the_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert load_settings().poll_chain == POLL_CHAIN == 20
    monkeypatch.setenv("RELAYFLOW_POLL_CHAIN", "3")
    settings = load_settings()
    assert settings.poll_chain == 3
    assert limits(settings, load_topology()).poll_chain == 3


@pytest.mark.parametrize("value", ["0", str(MAX_POLL_CHAIN + 1), "x", "2.5", "-1", ""])
def test_a_bad_poll_chain_setting_is_refused_saying_what_it_takes(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("RELAYFLOW_POLL_CHAIN", value)
    with pytest.raises(ValidationError, match="RELAYFLOW_POLL_CHAIN is how many polls run"):
        load_settings()


def test_the_engines_limits_refuse_a_chain_out_of_range() -> None:
    with pytest.raises(ValueError, match=r"poll_chain must be 1\.\.100"):
        Limits(poll_chain=0)

"""The command line of ``python -m relayflow.emulators.client_api``."""

from __future__ import annotations

from relayflow.emulators.client_api.__main__ import parse_args


def test_defaults() -> None:
    args = parse_args([])

    assert (args.host, args.port, args.activation_delay_s) == ("127.0.0.1", 8125, 2.0)


def test_flags() -> None:
    args = parse_args(["--host", "127.0.0.1", "--port", "9999", "--activation-delay-s", "0.5"])

    assert (args.port, args.activation_delay_s) == (9999, 0.5)

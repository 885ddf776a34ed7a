"""The fake's command line::

python -m relayflow.emulators.orders_api --host 127.0.0.1 --port 8130 [--label-delay-s 2.0]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from relayflow.emulators.orders_api.app import create_app

DEFAULT_PORT = 8130  # the local stack's base port + 10, after the api (+ 9)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m relayflow.emulators.orders_api",
        description="Fake inventory, payments, shipping and notifications for examples/orders.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument(
        "--label-delay-s",
        type=float,
        default=2.0,
        help="seconds after creation at which a shipping label reads READY",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    app = create_app(label_delay_s=args.label_delay_s)
    # Threaded: slow-response faults must not hold up the other requests.
    app.run(host=args.host, port=args.port, threaded=True, use_reloader=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

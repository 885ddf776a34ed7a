"""The fake's command line::

    python -m relayflow.emulators.client_api --host 127.0.0.1 --port 8125 \
        [--activation-delay-s 2.0]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from relayflow.emulators.client_api.app import callback_dispatcher, create_app


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m relayflow.emulators.client_api",
        description="The fake registration API that relayflow's reference flow talks to.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8125)
    parser.add_argument(
        "--activation-delay-s",
        type=float,
        default=2.0,
        help="seconds after creation at which a registration reads ACTIVE",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    app = create_app(activation_delay_s=args.activation_delay_s)
    callbacks = callback_dispatcher(app)
    callbacks.start()
    try:
        # Threaded: slow-response faults must not hold up the other requests.
        app.run(host=args.host, port=args.port, threaded=True, use_reloader=False)
    finally:
        callbacks.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

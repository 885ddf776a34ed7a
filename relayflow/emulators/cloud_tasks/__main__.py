"""`python -m relayflow.emulators.cloud_tasks --host 127.0.0.1 --port 8123 --rest-port 8124`."""

from __future__ import annotations

import asyncio
import logging

from relayflow.emulators.cloud_tasks.app import serve
from relayflow.emulators.cloud_tasks.settings import parse_args


def main() -> None:
    settings = parse_args()
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    asyncio.run(serve(settings))


if __name__ == "__main__":
    main()

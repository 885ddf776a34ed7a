"""``python -m relayflow.schemas [--write]``: say which committed schemas differ from their
models (exit 1 if any does), or write them all."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from relayflow.schemas import SCHEMAS, render


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m relayflow.schemas")
    parser.add_argument("--write", action="store_true", help="write every schema file")
    args = parser.parse_args(argv)
    stale = []
    for published in SCHEMAS.values():
        text = render(published.generated())
        if args.write:
            published.path.write_text(text, encoding="utf-8")
            print(f"wrote {published.path}")
        elif not published.path.exists() or published.path.read_text(encoding="utf-8") != text:
            stale.append(published.file_name)
    if stale:
        print(f"out of date: {', '.join(stale)}; run python -m relayflow.schemas --write")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

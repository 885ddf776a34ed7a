"""``python -m relayflow.schemas [--write]``: say which committed schemas differ from their
models (exit 1 if any does), or write them all.

Besides the JSON Schemas, the files derived from them: the BigQuery table of result events
(``relayflow.schemas.bigquery``), when the Terraform it belongs to is beside this package (a
source tree, not an installed wheel).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from relayflow.schemas import SCHEMAS, bigquery, render


def files() -> list[tuple[Path, str]]:
    """Every generated file and the text it should hold."""
    found = [(p.path, render(p.generated())) for p in SCHEMAS.values()]
    if bigquery.TABLE_FILE.parent.is_dir():
        table = bigquery.table_schema(SCHEMAS["result-event"].generated())
        found.append((bigquery.TABLE_FILE, bigquery.render(table)))
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m relayflow.schemas")
    parser.add_argument("--write", action="store_true", help="write every schema file")
    args = parser.parse_args(argv)
    stale = []
    for path, text in files():
        if args.write:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
        elif not path.exists() or path.read_text(encoding="utf-8") != text:
            stale.append(path.name)
    if stale:
        print(f"out of date: {', '.join(stale)}; run python -m relayflow.schemas --write")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

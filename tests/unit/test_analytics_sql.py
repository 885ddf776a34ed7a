"""The SQL of docs/analytics.md reads only columns the result events' table has (no BigQuery
here: each query is read token by token), and prices flows as bench/prices.py does."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest

from bench.prices import cost_terms
from relayflow.schemas import bigquery

DOC = Path(__file__).resolve().parents[2] / "docs" / "analytics.md"
TABLE = "`PROJECT.relayflow_analytics.result_events`"
# GoogleSQL words the queries use that are neither columns nor aliases.
KEYWORDS = {
    "select", "from", "where", "and", "or", "not", "as", "with", "group", "by", "order",
    "desc", "asc", "limit", "qualify", "over", "partition", "interval", "day", "millisecond",
    "cross", "join", "is", "null", "in", "case", "when", "then", "else", "end", "true",
    "false", "distinct", "having",
}  # fmt: skip
_CODE = re.compile(r"```sql\n(.*?)```", re.DOTALL)
_CTE = re.compile(r"(?:\bWITH\b|,)\s*([A-Za-z_]\w*)\s+AS\s*\(", re.IGNORECASE)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


def queries(text: str | None = None) -> list[str]:
    return _CODE.findall(DOC.read_text(encoding="utf-8") if text is None else text)


def columns() -> dict[str, Any]:
    """Every column path of the table (``cleanup.state``), with its column."""
    found: dict[str, Any] = {}

    def walk(cols: list[dict[str, Any]], prefix: str) -> None:
        for col in cols:
            path = f"{prefix}{col['name']}"
            found[path] = col
            walk(col.get("fields", []), f"{path}.")

    walk(json.loads(bigquery.TABLE_FILE.read_text(encoding="utf-8")), "")
    return found


def _tokens(sql: str) -> list[tuple[str, bool]]:
    """Identifiers (dotted paths kept whole) and whether each is called like a function;
    comments, string literals and the quoted table name taken out."""
    plain = re.sub(r"--[^\n]*", " ", sql)
    plain = re.sub(r"'(?:[^'\\]|\\.)*'", " ", plain)
    plain = plain.replace(TABLE, " ")
    assert "`" not in plain, "the only quoted name a query uses is the table's"
    plain = re.sub(r"\b\d+(?:\.\d+)?\b", " ", plain)
    return [(m.group(0), plain[m.end() :].lstrip().startswith("(")) for m in _IDENT.finditer(plain)]


def problems(sql: str) -> list[str]:
    """What a query reads that the table does not have: every ``r.PATH`` is a column (any path
    inside a JSON column), and every other name is a keyword, a function, an alias or CTE the
    query defines, or a column one of its CTEs selects by name."""
    table = columns()
    tokens = _tokens(sql)
    defined = {b[0] for a, b in itertools.pairwise(tokens) if a[0].lower() == "as"}
    defined |= set(_CTE.findall(sql))
    selected = {name.split(".")[-1] for name, _ in tokens if name.startswith("r.")}
    found = []
    for name, called in tokens:
        head, _, rest = name.partition(".")
        if called or name.lower() in KEYWORDS or name in defined or name == "r":
            continue
        if head == "r":
            if not _in_table(rest, table):
                found.append(f"r.{rest} is not a column of the table")
        elif rest:
            if head not in defined or rest not in defined | selected:
                found.append(f"{name}: {head} defines no {rest}")
        elif name not in selected:
            found.append(f"{name} is neither a column a CTE selects nor an alias")
    return found


def _in_table(path: str, table: dict[str, Any]) -> bool:
    parts = path.split(".")
    for n in range(len(parts), 0, -1):
        column = table.get(".".join(parts[:n]))
        if column is not None:
            return n == len(parts) or column["type"] == "JSON"  # a path inside JSON is free
    return False


def test_the_doc_has_the_four_queries_each_reading_the_table_as_r() -> None:
    found = queries()
    assert len(found) == 4
    for sql in found:
        assert f"FROM {TABLE} AS r" in sql
        assert "r.publish_time >=" in sql, "each query reads only the partitions it needs"


@pytest.mark.parametrize("index", range(4), ids=["success", "p95", "failures", "cost"])
def test_each_query_reads_only_columns_the_table_has(index: int) -> None:
    assert problems(queries()[index]) == []


def test_the_check_finds_a_misspelled_or_missing_column() -> None:
    sql = f"""WITH e AS (SELECT r.flow, r.stauts, r.cleanup.state, r.cleanup.nope, r.data.any.path
    FROM {TABLE} AS r) SELECT flow, version, e.flow, e.elsewhere, COUNT(*) AS n FROM e"""
    assert problems(sql) == [
        "r.stauts is not a column of the table",
        "r.cleanup.nope is not a column of the table",
        "version is neither a column a CTE selects nor an alias",
        "e.elsewhere: e defines no elsewhere",
    ]


def test_the_cost_query_prices_a_flow_as_bench_prices_does() -> None:
    cost = queries()[3]
    match = re.search(r"SELECT ([\d.]+) AS per_flow, ([\d.]+) AS per_try", cost)
    assert match, "the cost query names its prices in its prices CTE"
    terms = cost_terms()
    assert (float(match.group(1)), float(match.group(2))) == (
        round(terms.per_flow_usd * 1e6, 2),
        round(terms.per_try_usd * 1e6, 2),
    )
    assert "r.polls + r.attempts AS tries" in cost

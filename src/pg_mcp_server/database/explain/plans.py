"""explain_query: EXPLAIN behind the same guard, and warnings read from the plan's structure.

ANALYZE executes the statement, so it is guarded like any query and runs read-only, never
committed. EXPLAIN runs once, in JSON (YAML when that is what was asked for): cost, rows, timing
and warnings come from its structure, and a text plan is written from it (explain/text.py), so the
statement executes once whatever the format. The EXPLAIN statement is built in the parse tree
and kept prepared per connection like any query's: a repeated explain is one round trip (plus
one for table sizes when the plan has sequential scans).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import yaml
from pglast import ast, parse_sql

from pg_mcp_server.database.explain.text import render
from pg_mcp_server.database.guard import SqlGuard
from pg_mcp_server.database.pool import Database, transaction_of
from pg_mcp_server.database.rows import Shapes, bind, judge_hidden, rewrite, scrubbed
from pg_mcp_server.database.sql import statement, tree as sqltree
from pg_mcp_server.errors import ParameterError, PermissionDeniedError

LARGE_TABLE = 10_000  # rows: a sequential scan above this is worth a warning
ESTIMATE_FACTOR = 10  # planned vs actual rows: off by this much is worth a warning

RELATION_ROWS = statement(
    "explain.plans.RELATION_ROWS",
    """
SELECT n.nspname, c.relname, c.reltuples::bigint AS rows
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.relname = ANY($1::text[])
""",
)

# The relations the guard locked for a statement whose rows row-level security filters for
# the current role (see hidden_rows_refused).
FILTERED = statement(
    "explain.plans.FILTERED",
    """
SELECT c.oid::pg_catalog.regclass::pg_catalog.text AS name
FROM pg_catalog.pg_class c
WHERE c.oid = ANY ($1::pg_catalog.oid[]) AND pg_catalog.row_security_active(c.oid)
ORDER BY 1
""",
)


async def refuse_hidden_rows(conn: asyncpg.Connection, db: Database) -> None:
    """For a caller identified as a user (identity/), refuse to plan a statement that reads a
    table whose row-level security filters it (attack7 F2): a plan tells what the policy
    hides, as `Rows Removed by Filter` under ANALYZE and as estimates drawn from statistics
    over every tenant's rows without it. Without an identity (the server's own role, as
    before) nothing is asked. Run after the guard's check, whose locks name the relations."""
    if db.assumed() is None:
        return
    transaction = transaction_of(conn)
    oids = sorted(transaction.locked) if transaction is not None else []
    if not oids:
        return
    filtered = [r["name"] for r in await conn.fetch(FILTERED, oids)]
    if filtered:
        raise PermissionDeniedError(
            "Plans are not shown for a statement that reads a table whose row-level security "
            f"filters your rows ({', '.join(filtered[:5])}): a plan's row counts and estimates "
            "describe rows the policy hides from you.",
            suggestion="Run the query with execute_query (it returns only your rows), or ask "
            "an operator for its plan.",
            context={"rule": "row_security", "tables": filtered[:5]},
        )


@dataclass
class PlanResult:
    plan: str | dict[str, Any] | list[Any]
    estimated_cost: float | None
    estimated_rows: int | None
    actual_time_ms: float | None
    warnings: list[str]


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def _filter_columns(expression: str) -> list[str]:
    """Column names in a plan's Filter expression, read with PostgreSQL's parser."""
    tree = sqltree.parse(f"SELECT 1 WHERE {expression}")
    return sorted(sqltree.last_names(tree, "ColumnRef", "fields")) if tree else []


def warnings_for(root: dict[str, Any], table_rows: dict[tuple[str | None, str], int]) -> list[str]:
    """Performance hints: big sequential scans, bad estimates, spills, big nested loops."""
    out: list[str] = []
    for node in _nodes(root):
        kind = node.get("Node Type", "")
        loops = node.get("Actual Loops") or 1
        if kind == "Seq Scan":
            name = node.get("Relation Name", "?")
            rows = table_rows.get((node.get("Schema"), name), table_rows.get((None, name), 0))
            if rows >= LARGE_TABLE:
                cols = _filter_columns(node["Filter"]) if node.get("Filter") else []
                hint = (
                    f" filtering on {', '.join(cols)} - consider an index on "
                    f"{'(' + ', '.join(cols) + ')' if len(cols) > 1 else cols[0]}"
                    if cols
                    else " without a filter - add a WHERE clause or LIMIT if you need fewer rows"
                )
                out.append(f"Sequential scan on '{name}' (~{rows} rows){hint}")
        if "Actual Rows" in node and node.get("Plan Rows"):
            planned, actual = node["Plan Rows"], node["Actual Rows"] * loops
            high, low = max(planned, actual), max(min(planned, actual), 1)
            if high / low >= ESTIMATE_FACTOR and high >= 100:
                out.append(
                    f"Row estimate off by {high / low:.0f}x at {kind} (planned {planned}, "
                    f"actual {actual}): run ANALYZE on the tables involved"
                )
        if node.get("Sort Space Type") == "Disk" or "external" in str(node.get("Sort Method", "")):
            out.append(
                f"Sort spilled to disk ({node.get('Sort Space Used', '?')} kB): "
                "raise work_mem or sort fewer rows"
            )
        if kind == "Hash" and (node.get("Hash Batches") or 1) > 1:
            out.append(
                f"Hash spilled to disk in {node['Hash Batches']} batches: "
                "raise work_mem or join fewer rows"
            )
        if kind == "Nested Loop" and node.get("Plans"):
            outer = node["Plans"][0]
            outer_rows = outer.get("Actual Rows", outer.get("Plan Rows", 0)) * (
                outer.get("Actual Loops") or 1
            )
            inner = node["Plans"][1] if len(node["Plans"]) > 1 else {}
            if outer_rows >= LARGE_TABLE and inner.get("Node Type") == "Seq Scan":
                out.append(
                    f"Nested loop over ~{outer_rows} outer rows with a sequential scan inside: "
                    f"an index on the join column of '{inner.get('Relation Name', '?')}' may help"
                )
    return out


def explain_sql(sql: str, *, fmt: str, analyze: bool, verbose: bool, buffers: bool) -> str:
    """EXPLAIN (options) of the caller's statement, put together in the parse tree."""
    flags = [f"FORMAT {fmt.upper()}"]
    flags += ["ANALYZE"] * analyze + ["VERBOSE"] * verbose + ["BUFFERS"] * buffers
    (raw,) = parse_sql(f"EXPLAIN ({', '.join(flags)}) SELECT")
    stmt = raw.stmt
    assert isinstance(stmt, ast.ExplainStmt)
    stmt.query = rewrite.parse(sql)
    return rewrite.deparse(stmt)


async def explain(
    conn: asyncpg.Connection,
    db: Database,
    guard: SqlGuard,
    sql: str,
    params: list[Any] | None,
    *,
    analyze: bool,
    fmt: str,
    verbose: bool,
    buffers: bool,
    shapes: Shapes | None = None,
    sensitive: re.Pattern[str] | None = None,
) -> PlanResult:
    """The plan of `sql`. With `shapes` (whose relation facts it uses), a use of a sensitive
    value that the plan would tell (row counts, estimates, an error) is refused, as
    execute_query refuses it (database/rows/redaction.py), and errors of a statement that reads
    one are scrubbed of values."""
    if buffers and not analyze:
        raise ParameterError(
            "buffers=true needs analyze=true (buffer counts come from running the query).",
            suggestion="Set analyze=true, or drop buffers.",
            context={"buffers": buffers, "analyze": analyze},
        )
    sql = await guard.check(sql, conn)  # (names qualified where its path needs it)
    await refuse_hidden_rows(conn, db)
    reads_sensitive = shapes is not None and await judge_hidden(
        conn, shapes, sql, sensitive, guard.state.relations.generation
    )
    structured = "yaml" if fmt == "yaml" else "json"
    stmt, _ = await db.prepare(
        conn,
        explain_sql(sql, fmt=structured, analyze=analyze, verbose=verbose, buffers=buffers),
    )
    types = stmt.get_parameters()
    if types and params is None:
        # A generic plan would need the simple query protocol (bound values are planned as
        # constants), and user SQL only ever runs on the extended protocol.
        raise ParameterError(
            f"The query has {len(types)} $n placeholder(s); explain needs example values.",
            suggestion="Pass representative values in `params` (they shape the estimates).",
            context={"expected": len(types)},
        )
    try:
        rows = await stmt.fetch(*bind(params, types))
    except asyncpg.PostgresError as exc:
        clean = scrubbed(exc) if reads_sensitive else None
        if clean is not None:
            raise clean from None
        raise
    raw = "\n".join(r[0] for r in rows) if structured == "yaml" else ""
    if structured == "yaml":
        document = yaml.safe_load(raw)
    else:
        document = rows[0][0] if not isinstance(rows[0][0], str) else json.loads(rows[0][0])
    top = document[0]
    root = top["Plan"]

    scanned = sorted({n["Relation Name"] for n in _nodes(root) if n.get("Node Type") == "Seq Scan"})
    table_rows: dict[tuple[str | None, str], int] = {}
    if scanned:
        for r in await conn.fetch(RELATION_ROWS, scanned):
            table_rows[(r["nspname"], r["relname"])] = r["rows"]
            key = (None, r["relname"])
            table_rows[key] = max(table_rows.get(key, 0), r["rows"])

    plan: str | dict[str, Any] | list[Any]
    if fmt == "json":
        plan = document
    elif fmt == "yaml":
        plan = raw
    else:
        plan = render(document, conn.get_server_version().major, verbose=verbose)
    actual = top.get("Execution Time")
    return PlanResult(
        plan=plan,
        estimated_cost=root.get("Total Cost"),
        estimated_rows=root.get("Plan Rows"),
        actual_time_ms=float(actual) if actual is not None else None,
        warnings=warnings_for(root, table_rows),
    )

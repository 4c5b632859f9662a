"""analyze_query_indexes: candidate indexes for one query, each measured with HypoPG.

The query is judged by the guard and planned through explain_query's own path
(`explain.explain`, in the caller's read-only transaction), once as it is and once with each
candidate created as a hypothetical index (HypoPG: planner-only, nothing is written). The
candidates come from the parse tree: the columns the query compares with a value or another
column (WHERE, JOIN ... ON) and orders by, one index per column, plus, per table, one over its
equality columns followed by its first range or ordering column.

Hypothetical indexes live in the backend's memory, outside transactions: they would outlive
this call in the pooled session and change later plans. Every path out removes them
(`hypopg_reset()`, under a savepoint when the work failed), and a session where that cannot be
confirmed (a cancelled call, a lost reset) is terminated, so the pool discards it.
HypoPG's functions are called in the schema the extension was created in, named with its
quoted name: they cannot be pinned to pg_catalog.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from pg_mcp_server.database.explain import explain
from pg_mcp_server.database.guard import SqlGuard, quote_ident
from pg_mcp_server.database.pool import Database
from pg_mcp_server.database.rows import Shapes
from pg_mcp_server.database.sql import statement, tree as sqltree
from pg_mcp_server.errors import ExtensionMissingError, InvalidSqlError

FIND = statement(
    "health.advice.FIND",
    """
SELECT n.nspname AS schema, e.extversion AS version
FROM pg_catalog.pg_extension e
JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
WHERE e.extname = 'hypopg'
""",
)

# The relations a statement names (schema resolved on the search path), with their columns.
COLUMNS = statement(
    "health.advice.COLUMNS",
    """
SELECT r.name, n.nspname AS schema, c.relname AS table_name, c.relkind::text AS kind,
       ARRAY(SELECT a.attname::text FROM pg_catalog.pg_attribute a
             WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
             ORDER BY a.attnum) AS columns
FROM pg_catalog.unnest($1::text[]) AS r(name)
JOIN pg_catalog.pg_class c ON c.oid = pg_catalog.to_regclass(r.name)
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
""",
)

_SAVEPOINT = "SAVEPOINT pg_mcp_advice"
_ROLLBACK = "ROLLBACK TO SAVEPOINT pg_mcp_advice"
_RELEASE = "RELEASE SAVEPOINT pg_mcp_advice"
MAX_CANDIDATES = 12
MIN_GAIN = 0.1  # a candidate must lower the plan's cost by this share to be advised


@dataclass
class Table:
    schema: str
    name: str
    columns: list[str]
    equal: list[str] = field(default_factory=list)  # compared with =
    other: list[str] = field(default_factory=list)  # ranges, joins' other operators, ORDER BY


def _column(node: Any) -> tuple[str | None, str] | None:
    """(qualifier, column) of a ColumnRef node; None for anything else (`*`, a.b.c)."""
    if not isinstance(node, dict) or "ColumnRef" not in node:
        return None
    parts = sqltree.names(node["ColumnRef"].get("fields", []))
    if len(parts) == 1:
        return None, parts[0]
    if len(parts) == 2:
        return parts[0], parts[1]
    return None


class _Columns:
    """The columns a statement compares and orders by, as (qualifier, column, kind), and
    its relations by alias (or name) as written."""

    def __init__(self, tree: Any) -> None:
        self.found: list[tuple[str | None, str, str]] = []
        self.relations: dict[str, str] = {}
        for key, value in sqltree.walk(tree):
            if key == "RangeVar":
                written = ".".join(
                    quote_ident(p) for p in (value.get("schemaname"), value["relname"]) if p
                )
                alias = value.get("alias", {}).get("aliasname") or value["relname"]
                self.relations[alias] = written
            elif key == "A_Expr" and value.get("kind") == "AEXPR_OP":
                operator = sqltree.names(value.get("name", []))[-1:]
                kind = "equal" if operator == ["="] else "other"
                for side in (value.get("lexpr"), value.get("rexpr")):
                    if name := _column(side):
                        self.found.append((*name, kind))
            elif key == "SortBy" and (name := _column(value.get("node"))):
                self.found.append((*name, "other"))


def statement_columns(sql: str) -> _Columns:
    tree = sqltree.parse(sql)
    if tree is None:  # the guard judged it: it parses
        raise InvalidSqlError("The query could not be read.")
    return _Columns(tree)


def create_index(table: Table, columns: list[str], how: str = "") -> str:
    cols = ", ".join(quote_ident(c) for c in columns)
    name = f"{quote_ident(table.schema)}.{quote_ident(table.name)}"
    return f"CREATE INDEX {how}ON {name} ({cols})"


async def _tables(conn: asyncpg.Connection, found: _Columns) -> list[Table]:
    return (await tables_of(conn, found))[0]


async def tables_of(conn: asyncpg.Connection, found: _Columns) -> tuple[list[Table], bool]:
    """The tables (and materialized views) a statement names, with the columns it compares
    and orders by; and whether it names anything else (a view, a CTE), whose plan an index
    on any table may change."""
    rows = await conn.fetch(COLUMNS, sorted(set(found.relations.values())))
    by_written = {r["name"]: r for r in rows if r["kind"] in ("r", "m", "p")}
    opaque = any(w not in by_written for w in found.relations.values())
    tables: dict[str, Table] = {}
    for alias, written in found.relations.items():
        r = by_written.get(written)
        if r is not None:
            tables[alias] = tables.get(written) or Table(
                r["schema"], r["table_name"], list(r["columns"])
            )
            tables[written] = tables[alias]
    unique = list({id(t): t for t in tables.values()}.values())
    for qualifier, column, kind in found.found:
        if qualifier is not None:
            owners = [tables[qualifier]] if qualifier in tables else []
        else:
            owners = [t for t in unique if column in t.columns]
        if len(owners) != 1 or column not in owners[0].columns:
            continue
        target = owners[0].equal if kind == "equal" else owners[0].other
        if column not in target:
            target.append(column)
    return unique, opaque


def candidates(tables: list[Table]) -> list[tuple[Table, list[str]]]:
    out: list[tuple[Table, list[str]]] = []
    for table in tables:
        singles = [[c] for c in dict.fromkeys(table.equal + table.other)]
        out += [(table, cols) for cols in singles]
        lead = [c for c in table.other if c not in table.equal][:1]
        combined = table.equal + lead
        if len(combined) > 1:
            out.append((table, combined))
    return out[:MAX_CANDIDATES]


async def hypopg_of(conn: asyncpg.Connection) -> asyncpg.Record:
    """HypoPG's schema and version; the error that names the fix when it is not installed."""
    found = await conn.fetchrow(FIND)
    if found is None:
        raise ExtensionMissingError(
            "HypoPG is not installed in this database: index advice measures each candidate "
            "as a hypothetical index with it.",
            suggestion="Install the package (Debian: apt-get install postgresql-NN-hypopg, NN "
            "the major version), then run CREATE EXTENSION hypopg; in this database (no "
            "restart or preload needed).",
            context={"extension": "hypopg", "installed": False},
        )
    return found


async def advise(
    conn: asyncpg.Connection,
    db: Database,
    guard: SqlGuard,
    sql: str,
    params: list[Any] | None,
    shapes: Shapes | None = None,
    sensitive: re.Pattern[str] | None = None,
) -> dict[str, Any]:
    """The plan's cost as it is and with each candidate index; those that lower it by
    MIN_GAIN or more, best first, with their estimated size and the statement to create
    them. Inside the caller's read-only transaction (the guard's). `shapes` and `sensitive`
    as explain_query passes them: a plan that would tell a redacted column's values (its
    estimates) is refused here as there."""
    found_ext = await hypopg_of(conn)
    hypopg = quote_ident(found_ext["schema"])

    async def cost() -> float:
        result = await explain(
            conn,
            db,
            guard,
            sql,
            params,
            analyze=False,
            fmt="json",
            verbose=False,
            buffers=False,
            shapes=shapes,
            sensitive=sensitive,
        )
        return float(result.estimated_cost or 0.0)

    before = await cost()  # the guard judges the query here, before anything else
    tables = await _tables(conn, statement_columns(sql))
    measured = []
    try:
        for table, columns in candidates(tables):
            create = create_index(table, columns)
            await conn.execute(_SAVEPOINT)
            try:
                row = await conn.fetchrow(
                    f"SELECT indexrelid, {hypopg}.hypopg_relation_size(indexrelid) AS size "
                    f"FROM {hypopg}.hypopg_create_index($1::pg_catalog.text)",
                    create,
                )
                assert row is not None
                after = await cost()
                await conn.execute(f"SELECT {hypopg}.hypopg_drop_index($1::pg_catalog.oid)", row[0])
            except asyncpg.PostgresError:
                await conn.execute(_ROLLBACK)
                await conn.execute(f"SELECT {hypopg}.hypopg_reset()")
                continue
            await conn.execute(_RELEASE)
            measured.append((table, columns, create, after, row["size"]))
        await conn.execute(f"SELECT {hypopg}.hypopg_reset()")
    except BaseException:
        # The reset could not be confirmed (cancelled, failed): the session goes, with every
        # hypothetical index in it.
        conn.terminate()
        raise
    advised = []
    for table, columns, _, after, size in sorted(measured, key=lambda m: m[3]):
        if before <= 0 or after > before * (1 - MIN_GAIN):
            continue
        advised.append(
            {
                "table": f"{table.schema}.{table.name}",
                "columns": columns,
                "cost_before": round(before, 2),
                "cost_after": round(after, 2),
                "improvement": round(before / after, 1) if after > 0 else None,
                "estimated_size_bytes": size,
                "create": create_index(table, columns, "CONCURRENTLY ") + ";",
            }
        )
    return {
        "cost": round(before, 2),
        "candidates": len(measured),
        "recommendations": advised,
        "hypopg_version": found_ext["version"],
    }

"""Errors that carry the fix: when PostgreSQL says a column or function of a query does not
exist, name what does exist, closest first, next to PostgreSQL's own hint.

Only on the error path, in one catalog statement on a connection of its own (the failed
transaction is aborted), opened only for these errors. The columns are those of the tables
the query names (a qualifier such as `t` in `t.duration_ms` is resolved through the query's
FROM list, so the suggestion names track's columns, not every table's); names are resolved
the way the query's were, through the search path.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

import asyncpg

from pg_mcp_server.database.sql import parse, statement, walk
from pg_mcp_server.errors import (
    ColumnNotFoundError,
    InvalidSqlError,
    PgMcpError,
    closest,
    did_you_mean,
    nearest_first,
)

# PostgreSQL quotes an unqualified name only: column "x" ..., column t.x ...
_COLUMN = re.compile(
    r'^column (?:"(?P<name>.+)"|(?P<qualifier>[^\s.]+)\.(?P<column>\S+)) does not exist'
)
_FUNCTION = re.compile(r"^function (?P<name>.+?)\((?P<arguments>.*)\) does not exist")
_UNDEFINED_FUNCTION = "42883"
SHOWN = 20  # names listed in a suggestion (the context has up to 100)

# A catalog connection, opened only when there is something to look up (Database.session).
Connect = Callable[[], AbstractAsyncContextManager[asyncpg.Connection]]

# The columns of each table the query names, as its search path resolves the names.
COLUMNS_OF = statement(
    "rows.hints.COLUMNS_OF",
    """
SELECT r.ord, c.oid::pg_catalog.regclass::text AS name,
       ARRAY(SELECT a.attname::text FROM pg_catalog.pg_attribute a
             WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
             ORDER BY a.attnum) AS columns
FROM pg_catalog.unnest($1::text[]) WITH ORDINALITY AS r(name, ord)
JOIN pg_catalog.pg_class c ON c.oid = pg_catalog.to_regclass(r.name)
ORDER BY r.ord
""",
)

# Functions the query could have meant: every visible name, and the signatures of this one.
FUNCTIONS_NEAR = statement(
    "rows.hints.FUNCTIONS_NEAR",
    """
SELECT ARRAY(SELECT DISTINCT p.proname::text FROM pg_catalog.pg_proc p
             WHERE pg_catalog.pg_function_is_visible(p.oid)) AS names,
       ARRAY(SELECT p.oid::pg_catalog.regprocedure::text FROM pg_catalog.pg_proc p
             WHERE p.proname = $1 AND pg_catalog.pg_function_is_visible(p.oid)
             ORDER BY 1 LIMIT 10) AS signatures
""",
)


@dataclass(frozen=True)
class Relation:
    """A table as the query names it: schema (or None), name, alias (or None)."""

    schema: str | None
    name: str
    alias: str | None

    @property
    def regclass(self) -> str:
        parts = [self.schema, self.name] if self.schema else [self.name]
        return ".".join('"' + p.replace('"', '""') + '"' for p in parts)

    @property
    def label(self) -> str:
        return f"{self.name} ({self.alias})" if self.alias else self.name


def relations(sql: str) -> list[Relation]:
    """The tables (and CTE names, which simply find no table) the query's FROM lists name."""
    tree = parse(sql)
    found: list[Relation] = []
    for key, value in walk(tree or {}):
        if key == "RangeVar" and isinstance(value, dict) and "relname" in value:
            alias = value.get("alias", {}).get("aliasname")
            rel = Relation(value.get("schemaname"), value["relname"], alias)
            if rel not in found:
                found.append(rel)
    return found


def _hint(error: PgMcpError) -> str:
    hint = (error.context or {}).get("hint")
    return f"{hint} " if hint else ""


async def column_hint(
    connect: Connect, error: ColumnNotFoundError, named: list[Relation]
) -> ColumnNotFoundError:
    """The columns of the table the missing column was looked for in (or of every table the
    query names, for an unqualified one), closest to the missing name first. A column error
    of ours (not PostgreSQL's, which has a SQLSTATE) already says what exists."""
    found = _COLUMN.match(error.message)
    if found is None or "sqlstate" not in (error.context or {}):
        return error
    missing = found["name"] or found["column"]
    qualifier = found["qualifier"]
    if qualifier:
        named = [r for r in named if (r.alias or r.name) == qualifier] or named
    if not named:
        return error
    async with connect() as conn:
        rows = await conn.fetch(COLUMNS_OF, [r.regclass for r in named])
    if not rows:
        return error
    tables: list[dict[str, Any]] = []
    lines = []
    for row in rows:
        rel = named[row["ord"] - 1]
        columns = nearest_first(missing, row["columns"])
        tables.append({"table": row["name"], "alias": rel.alias, "columns": columns[:100]})
        lines.append(f"{rel.label}: {', '.join(columns[:SHOWN])}")
    return ColumnNotFoundError(
        error.message,
        suggestion=f"{_hint(error)}Columns, closest first: " + "; ".join(lines) + ".",
        context={**(error.context or {}), "missing_column": missing, "tables": tables},
    )


async def function_hint(connect: Connect, error: PgMcpError) -> PgMcpError:
    """Functions named like the missing one; and when the name exists, its signatures."""
    found = _FUNCTION.match(error.message)
    if found is None or (error.context or {}).get("sqlstate") != _UNDEFINED_FUNCTION:
        return error
    name = found["name"].rsplit(".", 1)[-1].strip('"')
    async with connect() as conn:
        row = await conn.fetchrow(FUNCTIONS_NEAR, name)
    assert row is not None
    signatures: list[str] = row["signatures"]
    similar = [n for n in closest(name, row["names"], limit=5) if n != name]
    if signatures:
        suggestion = (
            f"{_hint(error)}{name} takes: {'; '.join(signatures)}. Cast the arguments "
            f"({found['arguments']}) to match, e.g. x::numeric."
        )
    else:
        suggestion = did_you_mean(similar, f"No function named {name} exists.")
    return InvalidSqlError(
        error.message,
        suggestion=suggestion,
        context={**(error.context or {}), "similar_functions": similar, "signatures": signatures},
    )

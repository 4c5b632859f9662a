"""How a query runs: guard, prepare, bind, fetch a bounded page.

The caller already holds a read-only session (`Database.read_only`). The statement is prepared
on asyncpg's extended protocol (one statement per Parse message, so nothing can be stacked
behind it), its parameter types come from PostgreSQL, and its portal is executed with a row
limit of `limit + 1`: the SQL text is never rewritten and an unbounded result is never fetched
whole.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from pg_mcp_server.database.engine import fetch_page
from pg_mcp_server.database.guard import SqlGuard
from pg_mcp_server.database.params import bind
from pg_mcp_server.database.values import REDACTED, converter_for, identity

# Readable names for the types asyncpg reports by their internal names.
_TYPE_NAMES = {
    "int2": "smallint",
    "int4": "integer",
    "int8": "bigint",
    "float4": "real",
    "float8": "double precision",
    "bool": "boolean",
    "bpchar": "character",
}


def type_name(typ: Any) -> str:
    """A readable, schema-qualified (outside pg_catalog) name for an asyncpg `Type`."""
    name: str = typ.name
    suffix = ""
    while name.endswith("[]"):  # asyncpg names arrays by their element: "int4[]"
        name, suffix = name[:-2], suffix + "[]"
    base = _TYPE_NAMES.get(name, name)
    schema = getattr(typ, "schema", None) or "pg_catalog"
    return (base if schema == "pg_catalog" else f"{schema}.{base}") + suffix


def _redact(value: Any) -> Any:
    return REDACTED


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def _within(rows: list[dict[str, Any]], max_bytes: int) -> list[dict[str, Any]]:
    """The longest prefix of rows whose JSON fits in max_bytes (always at least one row)."""
    size = 2
    for n, row in enumerate(rows):
        size += len(_dumps(row)) + 1
        if size > max_bytes:
            return rows[: max(n, 1)]
    return rows


def _rows(
    records: list[asyncpg.Record], names: list[str], converters: list[Callable[[Any], Any]]
) -> list[dict[str, Any]]:
    """Records as dicts, converting only the columns whose values need it."""
    todo = [(i, f) for i, f in enumerate(converters) if f is not identity]
    rows = []
    for record in records:
        values = list(record)
        for i, f in todo:
            if values[i] is not None:
                values[i] = f(values[i])
        rows.append(dict(zip(names, values, strict=True)))
    return rows


def query_hash(sql: str) -> str:
    return hashlib.sha256(sql.encode()).hexdigest()[:16]


def unique_names(names: list[str]) -> list[str]:
    """Row keys must be unique: `SELECT a.id, b.id` gives id and id_2."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        if name in seen:
            seen[name] += 1
            candidate = f"{name}_{seen[name]}"
            while candidate in seen:
                seen[name] += 1
                candidate = f"{name}_{seen[name]}"
            seen[candidate] = 1
            out.append(candidate)
        else:
            seen[name] = 1
            out.append(name)
    return out


async def fetch_upto(
    conn: asyncpg.Connection, sql: str, params: list[Any] | None, n: int
) -> tuple[asyncpg.prepared_stmt.PreparedStatement, list[asyncpg.Record]]:
    """Prepare, bind and read at most `n` rows (the caller's transaction, see `fetch_page`).

    The statement comes from the connection's statement cache (asyncpg's own, the one `fetch`
    uses, reached through its private `_prepare(use_cache=True)`: the public `prepare` always
    parses anew), so SQL that ran on this connection before costs no Parse round trip. Bind
    and Execute (row limit `n`) go together; the portal is left unread beyond that and goes
    with the rolled-back transaction.
    """
    stmt = await conn._prepare(sql, use_cache=True)
    args = bind(params, stmt.get_parameters())
    return stmt, await fetch_page(conn, stmt, args, n)


@dataclass
class QueryResult:
    columns: list[tuple[str, str]]
    rows: list[dict[str, Any]]
    rows_json: str  # the rows as JSON text, made once for the size cap and reused in the answer
    has_more: bool
    elapsed_ms: float
    notes: list[str] = field(default_factory=list)


async def run_query(
    conn: asyncpg.Connection,
    guard: SqlGuard,
    sql: str,
    params: list[Any] | None,
    *,
    limit: int,
    max_bytes: int,
    sensitive: re.Pattern[str] | None,
) -> QueryResult:
    await guard.check(sql, conn)
    started = time.perf_counter()
    stmt, records = await fetch_upto(conn, sql, params, limit + 1)
    elapsed_ms = (time.perf_counter() - started) * 1000

    attributes = stmt.get_attributes()
    names = unique_names([a.name for a in attributes])
    notes: list[str] = []
    if names != [a.name for a in attributes]:
        notes.append("duplicate column names were made unique (name_2, ...)")
    # One conversion per column, decided once: redaction, or what the type needs.
    hidden = {n for n in names if sensitive is not None and sensitive.search(n)}
    converters = [
        _redact if name in hidden else converter_for(a.type.name, a.type.kind)
        for name, a in zip(names, attributes, strict=True)
    ]
    has_more = len(records) > limit
    rows = _rows(records[:limit], names, converters)
    if has_more:
        notes.append(f"more rows exist beyond the limit of {limit}; add LIMIT/OFFSET to page")
    rows_json = _dumps(rows)
    if len(rows_json) > max_bytes:
        rows = _within(rows, max_bytes)
        rows_json = _dumps(rows)
        has_more = True
        notes.append(
            f"cut after {len(rows)} rows at the {max_bytes}-byte result limit; "
            "select fewer columns or rows"
        )
    redacted = {n for n in hidden if any(r[n] is not None for r in rows)}
    if redacted:
        notes.append("redacted sensitive columns: " + ", ".join(sorted(redacted)))
    return QueryResult(
        columns=[(n, type_name(a.type)) for n, a in zip(names, attributes, strict=True)],
        rows=rows,
        rows_json=rows_json,
        has_more=has_more,
        elapsed_ms=elapsed_ms,
        notes=notes,
    )

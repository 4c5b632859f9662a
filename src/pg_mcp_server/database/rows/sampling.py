"""get_sample_rows: a few real rows, safely.

Identifiers come from the catalog and are always quoted; the optional WHERE clause is
untrusted SQL and passes the read-only guard (shape, then functions) before it is spliced in;
the whole SELECT then runs inside the read-only transaction and comes back as JSON the way any
query's rows do (Reader.read), long values cut by PostgreSQL before they are sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg

from pg_mcp_server.database.catalog import tables as catalog
from pg_mcp_server.database.guard import quote_ident
from pg_mcp_server.database.rows import values
from pg_mcp_server.database.rows.reader import Reader, Rows
from pg_mcp_server.errors import ColumnNotFoundError, closest, did_you_mean

# Above this many estimated rows, random sampling reads a block sample (TABLESAMPLE SYSTEM)
# instead of sorting the whole table by random().
TABLESAMPLE_THRESHOLD = 10_000
_SAMPLEABLE = {"r", "m", "p"}


@dataclass
class Sample:
    columns: list[str]
    rows: list[list[Any]]  # one value per column, in `columns` order
    total_table_rows: int
    note: str | None


def _pick_columns(requested: list[str] | None, available: list[str], table: str) -> list[str]:
    if not requested:
        return available
    missing = [c for c in requested if c not in available]
    if missing:
        similar = closest(missing[0], available)
        raise ColumnNotFoundError(
            f"Column '{missing[0]}' does not exist in table '{table}'",
            suggestion=did_you_mean(similar, "Use describe_table to see the available columns."),
            context={
                "missing_columns": missing,
                "similar_columns": similar,
                "available_columns": available,
            },
        )
    return list(dict.fromkeys(requested))


async def sample_rows(
    conn: asyncpg.Connection,
    reader: Reader,
    *,
    schema: str,
    table: str,
    limit: int,
    columns: list[str] | None,
    where_clause: str | None,
    randomize: bool,
    max_text: int,
) -> Sample:
    """Up to `limit` rows; a value longer than `max_text` characters (MCP_MAX_VALUE_CHARS) is
    cut and marked (values.cut_marker): the sample shows what the data looks like, not all
    of it."""
    sensitive = reader.sensitive
    shape = await catalog.table_shape(conn, schema, table)
    chosen = _pick_columns(columns, list(shape["columns"]), table)
    estimated: int = shape["estimated_rows"]
    if not shape["relispopulated"]:
        return Sample(
            columns=chosen,
            rows=[],
            total_table_rows=0,
            note="materialized view not populated yet (REFRESH MATERIALIZED VIEW fills it)",
        )
    source = f"{quote_ident(schema)}.{quote_ident(table)}"
    select_list = ", ".join(quote_ident(c) for c in chosen) or "*"

    where = ""
    notes: list[str] = []
    if where_clause is not None and where_clause.strip():
        where = " WHERE " + reader.guard.where_clause(where_clause, source)
        notes.append("filtered by where_clause")

    use_tablesample = (
        randomize and estimated > TABLESAMPLE_THRESHOLD and shape["relkind"] in _SAMPLEABLE
    )
    # Our parts of this statement name their functions with pg_catalog by hand (see
    # pinned.py): pin() would pin the caller's WHERE clause too, and change what it means.
    # (Not the TABLESAMPLE method, which pglast cannot print qualified; it is found by its
    # exact signature, system(internal), which only a C function can have.)
    order = ""
    if randomize:
        order = " ORDER BY pg_catalog.random()"
        notes.append("randomized")
    elif shape["primary_key"] and any(
        sensitive is not None and sensitive.search(c) for c in shape["primary_key"]
    ):
        # Sorting by a sensitive key would tell the order of its redacted values (and is
        # refused, see lineage.py).
        notes.append("primary key is sensitive: rows in storage order")
    elif shape["primary_key"]:
        order = " ORDER BY " + ", ".join(quote_ident(c) for c in shape["primary_key"])
        notes.append("first rows ordered by primary key")
    else:
        notes.append("no primary key: rows in storage order")

    def build(sampled: bool) -> str:
        frm = source
        if sampled:
            # Blocks are sampled, not rows: aim for ~50x the wanted rows and at least 20
            # blocks, so a short page or a filter still leaves enough to choose from.
            by_rows = limit * 50 / max(estimated, 1)
            by_pages = 20 / max(shape["relpages"], 1) if shape["relpages"] > 0 else 0.0
            percent = min(100.0, max(0.001, 100.0 * max(by_rows, by_pages)))
            frm = f"{source} TABLESAMPLE SYSTEM ({percent:.4f})"
        return f"SELECT {select_list} FROM {frm}{where}{order} LIMIT {int(limit)}"

    async def read(sampled: bool) -> Rows:
        # The assembled statement passes the same gate as a user's query.
        return await reader.read(conn, build(sampled), limit=limit, max_text=max_text)

    got = await read(use_tablesample)
    if use_tablesample and len(got.rows) < limit:
        # The block sample came up short (a selective filter, or few blocks): sort them all.
        got = await read(False)
    elif use_tablesample:
        notes.append("block sample (TABLESAMPLE SYSTEM)")
    if got.cut_by_size:
        notes.append(f"cut at the {reader.budget.bytes}-byte result limit")
    redacted = values.redacted_names(got.columns, got.rows)
    if redacted:
        notes.append("redacted sensitive columns: " + ", ".join(redacted))
    if values.any_cut(got.rows):
        notes.append(f"values longer than {max_text} characters are cut, marked with their length")
    if any(
        c.base == "bytea" and any(r[i] is not None for r in got.rows)
        for i, c in enumerate(got.columns)
    ):
        notes.append("bytea values are base64-encoded")
    return Sample(
        columns=chosen,
        rows=got.rows,
        total_table_rows=estimated,
        note="; ".join(notes),
    )

"""Schema and table names for completions (by prefix, case-insensitive) and prompts.

A completion runs on every keystroke, so a table completion is one statement that reads
pg_class through its (relname, relnamespace) index instead of scanning it (a scan costs ~10 ms
at 10,000 tables, more on a busy machine): that index is in C order, so a prefix is a key
range, and a case-insensitive prefix is the union of the ranges of its case variants. Varying
the first CASED_CHARS letters gives at most RANGES ranges (each range is planned, so fewer is
cheaper); the rest of a longer prefix is checked with ILIKE on the names those ranges hold
(in the database's collation: a name's own, "C", folds only ASCII letters).
Each range is an ordered index scan that stops after MAX_VALUES + 1 names, so a prefix
matching 10,000 tables costs what one matching 101 does; the price is that `total` is given
only when every match fits in the answer (see bench/README.md, "Earlier findings").
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import asyncpg

from pg_mcp_server.database.catalog import tables as catalog
from pg_mcp_server.database.sql import statement
from pg_mcp_server.errors import ParameterError

MAX_VALUES = 100  # names a completion returns (the protocol's limit)
NAME_BYTES = 63  # PostgreSQL truncates identifiers to NAMEDATALEN - 1 bytes
CASED_CHARS = 2
RANGES = 2**CASED_CHARS
_TOP = "\U0010ffff"  # sorts after every other character in C order

_RELKINDS = "('r', 'p', 'f', 'v', 'm')"
_RANGE = f"""(SELECT c.relname FROM pg_catalog.pg_class c
     WHERE c.relname >= ${{lo}}::name AND c.relname < ${{hi}}::name
       AND c.relnamespace = (SELECT ns.oid FROM ns)
       AND c.relkind IN {_RELKINDS} AND NOT c.relispartition
       AND ($2::text IS NULL OR c.relname::text COLLATE "default" ILIKE $2)
     ORDER BY c.relname LIMIT $3)"""
# $1 schema, $2 ILIKE pattern or NULL, $3 MAX_VALUES + 1, $4.. the ranges' bounds ('' to ''
# for an unused one). The ranges are separate branches rather than an unnested array so the
# planner sees each range's bounds (and so its size) and picks the index scan that stops early.
TABLE_NAMES = statement(
    "catalog.names.TABLE_NAMES",
    f"""
WITH ns AS (SELECT n.oid FROM pg_catalog.pg_namespace n WHERE n.nspname = $1),
hits AS ({" UNION ALL ".join(_RANGE.format(lo=4 + 2 * i, hi=5 + 2 * i) for i in range(RANGES))})
SELECT (SELECT pg_catalog.count(*) FROM hits)::int AS found,
       ARRAY(SELECT h.relname::text FROM hits h ORDER BY h.relname LIMIT {MAX_VALUES}) AS names
FROM ns
""",
)

# pg_namespace is small: a plain scan. System schemas only when the prefix names one.
SCHEMA_NAMES = statement(
    "catalog.names.SCHEMA_NAMES",
    f"""
SELECT pg_catalog.count(*)::int AS total,
       (pg_catalog.array_agg(n.nspname::text ORDER BY n.nspname))[1:{MAX_VALUES}] AS names
FROM pg_catalog.pg_namespace n
WHERE n.nspname::text COLLATE "default" ILIKE $1
  AND n.nspname !~ '^pg_(toast|temp_|toast_temp_)'
  AND (n.nspname !~ '^pg_' AND n.nspname <> 'information_schema' OR pg_catalog.length($2) >= 2)
""",
)

SCHEMA_EXISTS = statement(
    "catalog.names.SCHEMA_EXISTS",
    "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)",
)
TABLE_EXISTS = statement(
    "catalog.names.TABLE_EXISTS",
    f"""
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c
               JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN {_RELKINDS})
""",
)


@dataclass(frozen=True)
class Names:
    values: list[str]
    total: int | None  # None when there are more than MAX_VALUES
    has_more: bool


def like_prefix(prefix: str) -> str:
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"


def _after(text: str) -> str:
    """The least string above every string that starts with `text` (C order)."""
    text = text.rstrip(_TOP)
    if not text:
        return _TOP
    point = ord(text[-1]) + 1
    if 0xD800 <= point <= 0xDFFF:  # surrogates cannot be encoded: skip them
        point = 0xE000
    return text[:-1] + chr(point)


def _cased(ch: str) -> bool:
    return ch.lower() != ch.upper() and len(ch.lower()) == 1 and len(ch.upper()) == 1


def prefix_ranges(prefix: str) -> tuple[list[tuple[str, str]], str | None]:
    """Key ranges covering every case variant of `prefix`'s head (up to and including its
    CASED_CHARS-th cased character), and the ILIKE pattern still to check when the head is
    not the whole prefix."""
    head, cased = prefix, 0
    for i, ch in enumerate(prefix):
        if _cased(ch):
            cased += 1
            if cased > CASED_CHARS:
                head = prefix[:i]
                break
    choices = [sorted({ch.lower(), ch.upper()}) if _cased(ch) else [ch] for ch in head]
    starts = sorted({"".join(v) for v in itertools.product(*choices)})
    ranges = [(lo, _after(lo)) for lo in starts]
    return ranges, (like_prefix(prefix) if head != prefix else None)


def table_name_binds(schema: str, prefix: str) -> list[Any]:
    """TABLE_NAMES's parameters."""
    ranges, pattern = prefix_ranges(prefix)
    bounds = [b for r in ranges + [("", "")] * (RANGES - len(ranges)) for b in r]
    return [schema, pattern, MAX_VALUES + 1, *bounds]


def _too_long(prefix: str) -> bool:
    return len(prefix.encode()) > NAME_BYTES or "\0" in prefix


async def table_names(conn: asyncpg.Connection, schema: str, prefix: str) -> Names:
    """Tables, views and foreign tables of `schema` (partitions left out, as list_tables
    does) whose names start with `prefix`, ignoring case, in name order."""
    if _too_long(prefix) or _too_long(schema):
        return Names([], 0, False)
    row = await conn.fetchrow(TABLE_NAMES, *table_name_binds(schema, prefix))
    if row is None:  # no such schema
        return Names([], 0, False)
    found: int = row["found"]
    names: list[str] = row["names"]
    more = found > MAX_VALUES
    return Names(names, None if more else found, more)


async def schema_names(conn: asyncpg.Connection, prefix: str) -> Names:
    if _too_long(prefix):
        return Names([], 0, False)
    row = await conn.fetchrow(SCHEMA_NAMES, like_prefix(prefix), prefix)
    assert row is not None
    names: list[str] = row["names"] or []
    return Names(names, row["total"], row["total"] > len(names))


async def require_table(conn: asyncpg.Connection, schema: str, table: str) -> None:
    """Raise TABLE_NOT_FOUND (or SCHEMA_NOT_FOUND) with the closest names, as the tools do."""
    if not await conn.fetchval(TABLE_EXISTS, schema, table):
        raise await catalog.missing_table(conn, schema, table)


async def require_schema(conn: asyncpg.Connection, schema: str) -> None:
    if not await conn.fetchval(SCHEMA_EXISTS, schema):
        raise await catalog.missing_schema(conn, schema)


# A table name that may be qualified (`sales.orders`, `"Sales"."Order Items"`): the relation
# named exactly so first (a table may have a dot or quotes in its name), else the name as
# PostgreSQL parses a qualified identifier (parse_ident: unquoted parts folded to lower case,
# quoted ones kept). The CASE evaluates parse_ident only when there is no exact match, so a
# name that is no identifier fails only then.
SPLIT_NAME = statement(
    "catalog.names.SPLIT_NAME",
    """
SELECT CASE WHEN NOT EXISTS (
           SELECT 1 FROM pg_catalog.pg_class c
           JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p', 'v', 'm', 'f'))
       THEN pg_catalog.parse_ident($2) END AS parts
""",
)


def may_be_qualified(table: str) -> bool:
    return "." in table or '"' in table


async def split_name(
    conn: asyncpg.Connection, schema: str, table: str, default_schema: str
) -> tuple[str, str]:
    """(schema, table) for `table` as the caller gave it with `schema` (`default_schema` when
    not given): a relation with exactly that name first, else the qualified name's parts.
    PARAMETER_ERROR when `schema` was given and the qualified name says another."""
    if not may_be_qualified(table):
        return schema, table
    try:
        parts = await conn.fetchval(SPLIT_NAME, schema, table)
    except asyncpg.InvalidParameterValueError:  # not an identifier: a missing table
        return schema, table
    if parts is None:  # the exact name exists
        return schema, table
    if len(parts) == 1:  # "Quoted Name"
        return schema, parts[0]
    if len(parts) != 2:
        return schema, table
    named, name = parts
    if schema not in (default_schema, named):
        raise ParameterError(
            f"table_name {table!r} names schema {named!r}, but schema_name is {schema!r}",
            suggestion=(
                f"Give schema_name={named!r}, table_name={name!r} (or only table_name "
                f"{table!r}), or schema_name={schema!r} with an unqualified table_name."
            ),
            context={"schema_name": named, "table_name": name, "given_schema_name": schema},
        )
    return named, name

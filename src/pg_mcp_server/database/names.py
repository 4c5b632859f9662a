"""Schema and table names for completions (by prefix, case-insensitive) and prompts.

A completion runs on every keystroke, so a table completion is one statement that reads
pg_class through its (relname, relnamespace) index instead of scanning it: that index is in
C order, so a prefix is a key range, and a case-insensitive prefix is the union of the ranges
of its case variants. Varying the first CASED_CHARS letters gives at most RANGES ranges; a
longer prefix is then checked in full with ILIKE on the few names those ranges hold. Each
range is its own index scan stopping after COUNT_CAP + 1 names, so a prefix that matches
10,000 tables costs about as much as one that matches 1,000 (see bench/bench_primitives.py).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import asyncpg

from pg_mcp_server.database import catalog

MAX_VALUES = 100  # names a completion returns (the protocol's limit)
COUNT_CAP = 1000  # matches counted exactly; beyond this `total` is unknown
NAME_BYTES = 63  # PostgreSQL truncates identifiers to NAMEDATALEN - 1 bytes
CASED_CHARS = 3
RANGES = 2**CASED_CHARS
_TOP = "\U0010ffff"  # sorts after every other character in C order

_RELKINDS = "('r', 'p', 'f', 'v', 'm')"
_RANGE = f"""(SELECT c.relname FROM pg_catalog.pg_class c
     WHERE c.relname >= ${{lo}}::name AND c.relname < ${{hi}}::name
       AND c.relnamespace = (SELECT ns.oid FROM ns)
       AND c.relkind IN {_RELKINDS} AND NOT c.relispartition
       AND ($2::text IS NULL OR c.relname::text ILIKE $2)
     ORDER BY c.relname LIMIT $3)"""
# $1 schema, $2 ILIKE pattern or NULL, $3 COUNT_CAP + 1, $4.. the ranges' bounds ('' to ''
# for an unused one). The ranges are separate branches rather than an unnested array so the
# planner sees each range's bounds and picks the ordered index scan that stops early.
TABLE_NAMES = f"""
WITH ns AS (SELECT n.oid FROM pg_catalog.pg_namespace n WHERE n.nspname = $1),
hits AS ({" UNION ALL ".join(_RANGE.format(lo=4 + 2 * i, hi=5 + 2 * i) for i in range(RANGES))})
SELECT (SELECT pg_catalog.count(*) FROM hits)::int AS total,
       ARRAY(SELECT h.relname::text FROM hits h ORDER BY h.relname LIMIT {MAX_VALUES}) AS names
FROM ns
"""

# pg_namespace is small: a plain scan. System schemas only when the prefix names one.
SCHEMA_NAMES = f"""
SELECT pg_catalog.count(*)::int AS total,
       (pg_catalog.array_agg(n.nspname::text ORDER BY n.nspname))[1:{MAX_VALUES}] AS names
FROM pg_catalog.pg_namespace n
WHERE n.nspname::text ILIKE $1
  AND n.nspname !~ '^pg_(toast|temp_|toast_temp_)'
  AND (n.nspname !~ '^pg_' AND n.nspname <> 'information_schema' OR pg_catalog.length($2) >= 2)
"""

SCHEMA_EXISTS = "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)"
TABLE_EXISTS = f"""
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c
               JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN {_RELKINDS})
"""


@dataclass(frozen=True)
class Names:
    values: list[str]
    total: int | None  # None when more than COUNT_CAP match
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


def _too_long(prefix: str) -> bool:
    return len(prefix.encode()) > NAME_BYTES or "\0" in prefix


async def table_names(conn: asyncpg.Connection, schema: str, prefix: str) -> Names:
    """Tables, views and foreign tables of `schema` (partitions left out, as list_tables
    does) whose names start with `prefix`, ignoring case, in name order."""
    if _too_long(prefix) or _too_long(schema):
        return Names([], 0, False)
    ranges, pattern = prefix_ranges(prefix)
    bounds = [b for r in ranges + [("", "")] * (RANGES - len(ranges)) for b in r]
    row = await conn.fetchrow(TABLE_NAMES, schema, pattern, COUNT_CAP + 1, *bounds)
    if row is None:  # no such schema
        return Names([], 0, False)
    total: int = row["total"]
    names: list[str] = row["names"]
    return Names(names, total if total <= COUNT_CAP else None, total > len(names))


async def schema_names(conn: asyncpg.Connection, prefix: str) -> Names:
    if _too_long(prefix):
        return Names([], 0, False)
    row = await conn.fetchrow(SCHEMA_NAMES, like_prefix(prefix), prefix)
    assert row is not None
    names: list[str] = row["names"] or []
    return Names(names, row["total"], row["total"] > len(names))


async def require_table(conn: asyncpg.Connection, schema: str, table: str) -> None:
    """Raise TABLE_NOT_FOUND (or SCHEMA_NOT_FOUND) with the closest names, as the tools do."""
    if (
        _too_long(schema)
        or _too_long(table)
        or not await conn.fetchval(TABLE_EXISTS, schema, table)
    ):
        raise await catalog.missing_table(conn, schema, table)


async def require_schema(conn: asyncpg.Connection, schema: str) -> None:
    if _too_long(schema) or not await conn.fetchval(SCHEMA_EXISTS, schema):
        raise await catalog.missing_schema(conn, schema)

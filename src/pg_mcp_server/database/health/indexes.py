"""Index checks: invalid, duplicate, redundant and unused indexes, and btree bloat estimates.

Sizes are `relpages` times the block size (as of the relation's last VACUUM, ANALYZE or
CREATE INDEX), not pg_relation_size(): that takes a lock on the relation, and a health check
must not queue behind the very lock chain it should report. Nothing here scans a table.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from pg_mcp_server.database.guard import quote_ident
from pg_mcp_server.database.health.findings import (
    MIB,
    Finding,
    Outcome,
    decoded,
    qualified,
    worst_first,
)
from pg_mcp_server.database.sql import statement

# Indexes of the user's schemas (not PostgreSQL's own, not TOAST's).
_USER_SCHEMA = """n.nspname <> 'pg_catalog' AND n.nspname <> 'information_schema'
    AND n.nspname !~ '^pg_toast'"""
_BLOCK = "pg_catalog.current_setting('block_size')::int8"

INVALID = statement(
    "health.indexes.INVALID",
    f"""
SELECT n.nspname AS schema, c.relname AS name, t.relname AS table_name,
       c.relpages::int8 * {_BLOCK} AS size_bytes, c.relkind = 'I' AS partitioned,
       EXISTS (SELECT FROM pg_catalog.pg_stat_progress_create_index p
               WHERE p.index_relid = c.oid) AS being_built,
       pg_catalog.count(*) OVER () AS total
FROM pg_catalog.pg_index i
JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
JOIN pg_catalog.pg_class t ON t.oid = i.indrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE NOT i.indisvalid AND {_USER_SCHEMA}
ORDER BY n.nspname, c.relname
LIMIT $1
""",
)

# Each valid index with what makes two indexes the same one: access method, key columns and
# expressions, operator classes, collations, sort options, predicate, uniqueness, NULLS NOT
# DISTINCT. `keep` ranks which of two the fix keeps: the primary key, then a partition of a
# partitioned index (it cannot be dropped alone), then a unique one, then one a constraint
# uses, then the older. `part_of`: the partitioned index an index is a partition of.
_INDEXES = f"""
WITH ix AS (
    SELECT i.indexrelid, i.indrelid, c.relam, n.nspname AS schema, c.relname AS name,
           t.relname AS table_name, c.relpages::int8 * {_BLOCK} AS size_bytes,
           i.indisunique, i.indnatts, i.indnkeyatts,
           i.indkey::text AS keys, i.indclass::text AS classes,
           i.indcollation::text AS collations, i.indoption::text AS options,
           coalesce(pg_catalog.pg_get_expr(i.indexprs, i.indrelid), '') AS exprs,
           coalesce(pg_catalog.pg_get_expr(i.indpred, i.indrelid), '') AS pred,
           i.indnullsnotdistinct AS nulls_not_distinct,
           k.conname AS constraint_name, c.relkind = 'I' AS partitioned,
           (SELECT p.relname FROM pg_catalog.pg_inherits h
            JOIN pg_catalog.pg_class p ON p.oid = h.inhparent
            WHERE h.inhrelid = i.indexrelid) AS part_of,
           i.indisprimary::int * 8 + c.relispartition::int * 4 + i.indisunique::int * 2
               + (k.conname IS NOT NULL)::int AS keep,
           coalesce(s.idx_scan, 0) AS scans
    FROM pg_catalog.pg_index i
    JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
    JOIN pg_catalog.pg_class t ON t.oid = i.indrelid
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    LEFT JOIN pg_catalog.pg_constraint k ON k.conindid = i.indexrelid
        AND k.conrelid = i.indrelid AND k.contype = ANY ('{{p,u,x}}'::"char"[])
    LEFT JOIN pg_catalog.pg_stat_all_indexes s ON s.indexrelid = i.indexrelid
    WHERE i.indisvalid AND {_USER_SCHEMA})
"""

DUPLICATES = statement(
    "health.indexes.DUPLICATES",
    _INDEXES
    + """
SELECT DISTINCT ON (a.indexrelid) a.schema, a.table_name, a.name, a.size_bytes, a.scans,
       a.constraint_name, a.partitioned, a.part_of, b.name AS duplicate_of,
       pg_catalog.count(*) OVER () AS total
FROM ix a JOIN ix b ON b.indrelid = a.indrelid AND b.indexrelid <> a.indexrelid
    AND b.relam = a.relam AND b.keys = a.keys AND b.classes = a.classes
    AND b.collations = a.collations AND b.options = a.options AND b.exprs = a.exprs
    AND b.pred = a.pred AND b.indisunique = a.indisunique
    AND b.nulls_not_distinct = a.nulls_not_distinct
WHERE b.keep > a.keep OR (b.keep = a.keep AND b.indexrelid < a.indexrelid)
ORDER BY a.indexrelid, b.keep DESC, b.indexrelid
LIMIT $1
""",
)

# A btree index whose key columns (no expressions, no predicate, no INCLUDE) are the leading
# key columns of another btree index on the table, with the same operator classes, collations
# and sort options: the longer index serves its scans. A unique one is not redundant (it
# enforces uniqueness on fewer columns).
REDUNDANT = statement(
    "health.indexes.REDUNDANT",
    _INDEXES
    + """
SELECT DISTINCT ON (a.indexrelid) a.schema, a.table_name, a.name, a.size_bytes, a.scans,
       a.constraint_name, a.partitioned, a.part_of, b.name AS covered_by,
       pg_catalog.count(*) OVER () AS total
FROM ix a JOIN ix b ON b.indrelid = a.indrelid AND b.indexrelid <> a.indexrelid
    AND b.relam = a.relam AND b.indnkeyatts > a.indnkeyatts
    AND (b.keys || ' ') ~~ (a.keys || ' %') AND (b.classes || ' ') ~~ (a.classes || ' %')
    AND (b.collations || ' ') ~~ (a.collations || ' %')
    AND (b.options || ' ') ~~ (a.options || ' %')
JOIN pg_catalog.pg_am am ON am.oid = a.relam
WHERE am.amname = 'btree' AND NOT a.indisunique AND a.indnatts = a.indnkeyatts
  AND a.exprs = '' AND a.pred = '' AND b.exprs = '' AND b.pred = ''
ORDER BY a.indexrelid, b.indnkeyatts, b.indexrelid
LIMIT $1
""",
)

UNUSED = statement(
    "health.indexes.UNUSED",
    f"""
SELECT s.schemaname AS schema, s.relname AS table_name, s.indexrelname AS name,
       s.idx_scan AS scans, c.relpages::int8 * {_BLOCK} AS size_bytes,
       NULL::name AS constraint_name, false AS partitioned,
       (SELECT p.relname FROM pg_catalog.pg_inherits h
        JOIN pg_catalog.pg_class p ON p.oid = h.inhparent
        WHERE h.inhrelid = s.indexrelid) AS part_of,
       (SELECT d.stats_reset FROM pg_catalog.pg_stat_database d
        WHERE d.datname = pg_catalog.current_database()) AS stats_reset,
       pg_catalog.count(*) OVER () AS total
FROM pg_catalog.pg_stat_user_indexes s
JOIN pg_catalog.pg_index i ON i.indexrelid = s.indexrelid
JOIN pg_catalog.pg_class c ON c.oid = s.indexrelid
WHERE s.idx_scan = 0 AND i.indisvalid AND NOT i.indisunique AND NOT i.indisprimary
  AND NOT EXISTS (SELECT FROM pg_catalog.pg_constraint k WHERE k.conindid = s.indexrelid)
ORDER BY c.relpages DESC, s.schemaname, s.indexrelname
LIMIT $1
""",
)

# The btree size estimate of ioguix/pgsql-bloat-estimation, simplified: a leaf tuple is an
# 8-byte header plus its columns' average width (pg_stats, less the NULLs), MAXALIGNed,
# plus a 4-byte line pointer; pages hold (block size - 24 page header - 16 btree special)
# bytes at the default fillfactor of 90 %; plus the metapage. Inner pages are left out (about
# 1 %). pg_stats shows only the columns this role may read: an index with a key column it may
# not read, or never analyzed, is counted in `unestimated`. It counts a tuple per row, so an
# index whose keys repeat (btree deduplication, PostgreSQL 13+, stores a key once) looks
# smaller than expected: its bloat is underestimated, never invented.
BLOAT = statement(
    "health.indexes.BLOAT",
    f"""
WITH cols AS (
    SELECT i.indexrelid, n.nspname AS schema, c.relname AS name, t.relname AS table_name,
           c.relpages::int8 AS pages, c.reltuples::float8 AS tuples,
           pg_catalog.sum((1 - st.null_frac) * st.avg_width)::float8 AS width,
           pg_catalog.count(st.avg_width) AS with_stats, pg_catalog.count(*) AS columns
    FROM pg_catalog.pg_index i
    JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
    JOIN pg_catalog.pg_class t ON t.oid = i.indrelid
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    JOIN pg_catalog.pg_am am ON am.oid = c.relam
    JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indexrelid
    LEFT JOIN pg_catalog.pg_attribute ta ON ta.attrelid = i.indrelid
        AND ta.attnum = i.indkey[a.attnum - 1] AND i.indkey[a.attnum - 1] <> 0
    LEFT JOIN pg_catalog.pg_stats st ON st.schemaname = n.nspname
        AND ((ta.attname IS NOT NULL AND st.tablename = t.relname AND st.attname = ta.attname)
          OR (ta.attname IS NULL AND st.tablename = c.relname AND st.attname = a.attname))
    WHERE am.amname = 'btree' AND i.indisvalid AND c.relpages >= $2 AND {_USER_SCHEMA}
    GROUP BY i.indexrelid, n.nspname, c.relname, t.relname, c.relpages, c.reltuples),
est AS (
    SELECT cols.*,
           1 + pg_catalog.ceil(cols.tuples * (8 * pg_catalog.ceil((8 + cols.width) / 8) + 4)
               / (({_BLOCK} - 40) * 0.9))::int8 AS expected_pages
    FROM cols WHERE cols.with_stats = cols.columns AND cols.tuples >= 0),
bloated AS (
    SELECT est.*, (est.pages - est.expected_pages) * {_BLOCK} AS bloat_bytes,
           1 - est.expected_pages::float8 / est.pages AS bloat_ratio
    FROM est WHERE est.pages > est.expected_pages)
SELECT (SELECT pg_catalog.count(*) FROM cols WHERE cols.with_stats < cols.columns)
           AS unestimated,
       (SELECT pg_catalog.count(*) FROM bloated b
        WHERE b.bloat_ratio >= $3 AND b.bloat_bytes >= $4) AS total,
       (SELECT coalesce(pg_catalog.json_agg(x), '[]') FROM (
            SELECT b.schema, b.table_name, b.name, b.pages * {_BLOCK} AS size_bytes,
                   b.bloat_bytes, pg_catalog.round(b.bloat_ratio::numeric, 3) AS bloat_ratio
            FROM bloated b
            WHERE b.bloat_ratio >= $3 AND b.bloat_bytes >= $4
            ORDER BY b.bloat_bytes DESC
            LIMIT $1) x) AS found
""",
)

UNUSED_WARNING_BYTES = 100 * MIB
BLOAT_MIN_PAGES = 128  # smaller indexes (1 MB at 8 kB blocks) are not worth estimating
BLOAT_INFO = (0.3, 1 * MIB)  # ratio, bytes
BLOAT_WARNING = (0.5, 100 * MIB)


def _drop(r: asyncpg.Record, numbers: dict[str, Any]) -> str:
    """The statement that drops index `r`: through its constraint if one uses it; none for a
    partition of a partitioned index (dropped only with it: `part_of` is added to the
    numbers); without CONCURRENTLY for a partitioned index, which PostgreSQL refuses."""
    if r["constraint_name"]:
        table = qualified(r["schema"], r["table_name"])
        return f"ALTER TABLE {table} DROP CONSTRAINT {quote_ident(r['constraint_name'])};"
    if r["part_of"]:
        numbers["part_of"] = r["part_of"]
        return ""
    name = qualified(r["schema"], r["name"])
    return f"DROP INDEX {name};" if r["partitioned"] else f"DROP INDEX CONCURRENTLY {name};"


async def invalid_indexes(conn: asyncpg.Connection, limit: int) -> Outcome:
    rows = await conn.fetch(INVALID, limit)
    findings = [
        Finding(
            "invalid_indexes",
            "info" if r["being_built"] else "warning",
            f"{r['schema']}.{r['name']}",
            {"table": r["table_name"], "size_bytes": r["size_bytes"]}
            | ({"being_built": True} if r["being_built"] else {}),
            ""
            if r["being_built"]
            else f"DROP INDEX {qualified(r['schema'], r['name'])};"
            if r["partitioned"]
            else f"DROP INDEX CONCURRENTLY {qualified(r['schema'], r['name'])};",
        )
        for r in rows
    ]
    return Outcome("invalid_indexes", worst_first(findings), rows[0]["total"] if rows else 0)


def _index_finding(check: str, severity: str, r: asyncpg.Record, **extra: Any) -> Finding:
    numbers: dict[str, Any] = {"table": r["table_name"], **extra}
    numbers |= {"size_bytes": r["size_bytes"], "scans": r["scans"]}
    fix = _drop(r, numbers)
    return Finding(check, severity, f"{r['schema']}.{r['name']}", numbers, fix)


async def duplicate_indexes(conn: asyncpg.Connection, limit: int) -> Outcome:
    rows = await conn.fetch(DUPLICATES, limit)
    findings = [
        _index_finding("duplicate_indexes", "warning", r, duplicate_of=r["duplicate_of"])
        for r in rows
    ]
    return Outcome("duplicate_indexes", findings, rows[0]["total"] if rows else 0)


async def redundant_indexes(conn: asyncpg.Connection, limit: int) -> Outcome:
    rows = await conn.fetch(REDUNDANT, limit)
    findings = [
        _index_finding("redundant_indexes", "info", r, covered_by=r["covered_by"]) for r in rows
    ]
    return Outcome("redundant_indexes", findings, rows[0]["total"] if rows else 0)


async def unused_indexes(conn: asyncpg.Connection, limit: int) -> Outcome:
    rows = await conn.fetch(UNUSED, limit)
    findings = []
    for r in rows:
        severity = "warning" if r["size_bytes"] >= UNUSED_WARNING_BYTES else "info"
        finding = _index_finding("unused_indexes", severity, r)
        finding.numbers["stats_since"] = r["stats_reset"].isoformat() if r["stats_reset"] else None
        findings.append(finding)
    note = (
        "scans are counted on this server only (a standby's are its own) since stats_since "
        "(null: since the cluster was created)"
    )
    return Outcome("unused_indexes", worst_first(findings), rows[0]["total"] if rows else 0, note)


async def index_bloat(conn: asyncpg.Connection, limit: int) -> Outcome:
    row = await conn.fetchrow(BLOAT, limit, BLOAT_MIN_PAGES, BLOAT_INFO[0], BLOAT_INFO[1])
    assert row is not None
    findings = [
        Finding(
            "index_bloat",
            "warning"
            if r["bloat_ratio"] >= BLOAT_WARNING[0] and r["bloat_bytes"] >= BLOAT_WARNING[1]
            else "info",
            f"{r['schema']}.{r['name']}",
            {
                "table": r["table_name"],
                "size_bytes": r["size_bytes"],
                "estimated_bloat_bytes": r["bloat_bytes"],
                "estimated_bloat_ratio": r["bloat_ratio"],
            },
            f"REINDEX INDEX CONCURRENTLY {qualified(r['schema'], r['name'])};",
        )
        for r in decoded(row["found"])
    ]
    note = "estimates from pg_stats column widths (btree indexes of 1 MB or more)"
    if row["unestimated"]:
        note += (
            f"; {row['unestimated']} not estimated: a key column never analyzed, or one whose "
            "statistics this role may not read (pg_stats shows only columns it may SELECT)"
        )
    return Outcome("index_bloat", worst_first(findings), row["total"], note)

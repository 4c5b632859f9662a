"""Table checks: dead tuples (the table bloat estimate), transaction ID freeze age, sequences
near their end, buffer cache hit rates, NOT VALID constraints. All from statistics views and
catalogs: no table is scanned or locked."""

from __future__ import annotations

import asyncpg

from pg_mcp_server.database.guard import quote_ident
from pg_mcp_server.database.health.findings import (
    Finding,
    Outcome,
    decoded,
    qualified,
    worst_first,
)
from pg_mcp_server.database.sql import statement

_USER_SCHEMA = """n.nspname <> 'pg_catalog' AND n.nspname <> 'information_schema'
    AND n.nspname !~ '^pg_toast'"""

# Dead tuples as a share of all: what VACUUM would make reusable. An estimate (the statistics
# system's counts since the last VACUUM), cheap and readable by every role.
DEAD = statement(
    "health.tables.DEAD",
    """
SELECT s.schemaname AS schema, s.relname AS name, s.n_live_tup AS live, s.n_dead_tup AS dead,
       pg_catalog.round((s.n_dead_tup::float8 / (s.n_live_tup + s.n_dead_tup))::numeric, 3)
           AS dead_ratio,
       s.last_vacuum, s.last_autovacuum, s.last_analyze, s.last_autoanalyze,
       coalesce('autovacuum_enabled=false' = ANY (c.reloptions), false) AS autovacuum_off,
       pg_catalog.count(*) OVER () AS total
FROM pg_catalog.pg_stat_user_tables s
JOIN pg_catalog.pg_class c ON c.oid = s.relid
WHERE s.n_dead_tup >= $2 AND s.n_dead_tup::float8 >= $3 * (s.n_live_tup + s.n_dead_tup)
ORDER BY s.n_dead_tup DESC
LIMIT $1
""",
)

# The oldest unfrozen transaction ID (and multixact) of every database, and of this
# database's tables (a TOAST table counted with its table), against
# autovacuum_freeze_max_age: past it, an anti-wraparound autovacuum is due.
FREEZE = statement(
    "health.tables.FREEZE",
    """
WITH limits AS (
    SELECT pg_catalog.current_setting('autovacuum_freeze_max_age')::int8 AS xid_max,
           pg_catalog.current_setting('autovacuum_multixact_freeze_max_age')::int8 AS mxid_max),
dbs AS (
    SELECT NULL::text AS schema, d.datname::text AS name, 'database' AS kind,
           pg_catalog.age(d.datfrozenxid)::int8 AS xid_age,
           pg_catalog.mxid_age(d.datminmxid)::int8 AS mxid_age
    FROM pg_catalog.pg_database d WHERE d.datallowconn),
rels AS (
    SELECT n.nspname::text AS schema, c.relname::text AS name, 'table' AS kind,
           GREATEST(pg_catalog.age(c.relfrozenxid),
                               pg_catalog.age(tc.relfrozenxid))::int8 AS xid_age,
           GREATEST(pg_catalog.mxid_age(c.relminmxid),
                               pg_catalog.mxid_age(tc.relminmxid))::int8 AS mxid_age
    FROM pg_catalog.pg_class c
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    LEFT JOIN pg_catalog.pg_class tc ON tc.oid = c.reltoastrelid
    WHERE c.relkind = ANY ('{r,m}'::"char"[]) AND n.nspname !~ '^pg_temp'),
old AS (
    SELECT x.*, l.xid_max, l.mxid_max FROM (SELECT * FROM dbs UNION ALL SELECT * FROM rels) x,
    limits l
    WHERE x.xid_age > l.xid_max * $2 OR x.mxid_age > l.mxid_max * $2)
SELECT old.*, pg_catalog.count(*) OVER () AS total FROM old
ORDER BY GREATEST(old.xid_age::float8 / old.xid_max,
                             old.mxid_age::float8 / old.mxid_max) DESC
LIMIT $1
""",
)

# The last value of each sequence this role may read (pg_sequences shows NULL otherwise),
# the share of its range used, the column it feeds (serial or identity).
SEQUENCES = statement(
    "health.tables.SEQUENCES",
    """
WITH seqs AS (
    SELECT n.nspname AS schema, c.relname AS name, pg_catalog.format_type(s.seqtypid, NULL)
               AS data_type,
           s.seqmin, s.seqmax, s.seqincrement,
           pg_catalog.has_sequence_privilege(c.oid, 'SELECT,USAGE') AS readable,
           CASE WHEN pg_catalog.has_sequence_privilege(c.oid, 'SELECT,USAGE')
                THEN pg_catalog.pg_sequence_last_value(c.oid) END AS last_value,
           (SELECT pg_catalog.json_build_object('schema', tn.nspname, 'table', t.relname,
                   'column', a.attname, 'type', pg_catalog.format_type(a.atttypid, a.atttypmod))
            FROM pg_catalog.pg_depend d
            JOIN pg_catalog.pg_class t ON t.oid = d.refobjid
            JOIN pg_catalog.pg_namespace tn ON tn.oid = t.relnamespace
            JOIN pg_catalog.pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
            WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.objid = c.oid
              AND d.refclassid = 'pg_catalog.pg_class'::regclass AND d.refobjsubid > 0
              AND d.deptype = ANY ('{a,i}'::"char"[])
            LIMIT 1) AS feeds
    FROM pg_catalog.pg_sequence s
    JOIN pg_catalog.pg_class c ON c.oid = s.seqrelid
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    WHERE NOT s.seqcycle AND n.nspname !~ '^pg_temp'),
used AS (
    SELECT seqs.*, CASE WHEN seqs.seqincrement > 0
               THEN (seqs.last_value - seqs.seqmin)::float8 / (seqs.seqmax - seqs.seqmin)
               ELSE (seqs.seqmax - seqs.last_value)::float8 / (seqs.seqmax - seqs.seqmin) END
               AS used
    FROM seqs WHERE seqs.last_value IS NOT NULL)
SELECT (SELECT pg_catalog.count(*) FROM seqs WHERE NOT seqs.readable) AS unreadable,
       (SELECT pg_catalog.count(*) FROM used WHERE used.used >= $2) AS total,
       (SELECT coalesce(pg_catalog.json_agg(x), '[]') FROM (
            SELECT used.schema, used.name, used.data_type, used.last_value,
                   used.seqmin AS min_value, used.seqmax AS max_value,
                   used.seqincrement AS increment_by,
                   pg_catalog.round(used.used::numeric, 4) AS used, used.feeds
            FROM used WHERE used.used >= $2 ORDER BY used.used DESC LIMIT $1) x) AS found
""",
)

CACHE = statement(
    "health.tables.CACHE",
    """
SELECT (SELECT pg_catalog.json_build_object(
            'hit', d.blks_hit, 'read', d.blks_read,
            'ratio', pg_catalog.round((d.blks_hit::float8
                     / CASE WHEN d.blks_hit + d.blks_read = 0 THEN 1
                            ELSE d.blks_hit + d.blks_read END)::numeric, 4),
            'stats_since', d.stats_reset)
        FROM pg_catalog.pg_stat_database d
        WHERE d.datname = pg_catalog.current_database()) AS db,
       (SELECT coalesce(pg_catalog.json_agg(x), '[]') FROM (
            SELECT s.schemaname AS schema, s.relname AS name,
                   s.heap_blks_hit, s.heap_blks_read,
                   pg_catalog.round((s.heap_blks_hit::float8
                       / (s.heap_blks_hit + s.heap_blks_read))::numeric, 4) AS heap_ratio,
                   s.idx_blks_hit, s.idx_blks_read
            FROM pg_catalog.pg_statio_user_tables s
            WHERE s.heap_blks_read >= $2
              AND s.heap_blks_hit::float8 < $3 * (s.heap_blks_hit + s.heap_blks_read)
            ORDER BY s.heap_blks_read DESC LIMIT $1) x) AS tables,
       (SELECT pg_catalog.count(*) FROM pg_catalog.pg_statio_user_tables s
        WHERE s.heap_blks_read >= $2
          AND s.heap_blks_hit::float8 < $3 * (s.heap_blks_hit + s.heap_blks_read)) AS total
""",
)

NOT_VALID = statement(
    "health.tables.NOT_VALID",
    f"""
SELECT n.nspname AS schema, t.relname AS table_name, k.conname AS name,
       CASE k.contype WHEN 'f' THEN 'foreign key' WHEN 'c' THEN 'check'
            WHEN 'n' THEN 'not null' ELSE k.contype::text END AS kind,
       pg_catalog.count(*) OVER () AS total
FROM pg_catalog.pg_constraint k
JOIN pg_catalog.pg_class t ON t.oid = k.conrelid
JOIN pg_catalog.pg_namespace n ON n.oid = t.relnamespace
WHERE NOT k.convalidated AND {_USER_SCHEMA}
ORDER BY n.nspname, t.relname, k.conname
LIMIT $1
""",
)

DEAD_MIN = 1000  # dead rows: fewer are never a finding
DEAD_WARNING = 0.2  # share of dead rows
DEAD_CRITICAL = (0.5, 1_000_000)  # share and count
FREEZE_WARNING = 1.0  # times autovacuum_freeze_max_age (or its multixact twin)
FREEZE_CRITICAL = 1_500_000_000  # XID age: PostgreSQL stops at 2^31 - 3 million
SEQUENCE_WARNING = 0.75
SEQUENCE_CRITICAL = 0.9
CACHE_MIN_BLOCKS = 10_000  # database-wide: fewer reads and hits tell nothing yet
CACHE_DB_WARNING = 0.99
CACHE_DB_CRITICAL = 0.9
CACHE_TABLE_MIN_READS = 1000
CACHE_TABLE_INFO = 0.95
_TYPE_MAX = {"smallint": 32767, "integer": 2147483647, "bigint": 9223372036854775807}


def _when(value: object) -> str | None:
    return value.isoformat() if value is not None else None  # type: ignore[attr-defined]


async def table_bloat(conn: asyncpg.Connection, limit: int) -> Outcome:
    rows = await conn.fetch(DEAD, limit, DEAD_MIN, DEAD_WARNING)
    findings = []
    for r in rows:
        critical = float(r["dead_ratio"]) >= DEAD_CRITICAL[0] and r["dead"] >= DEAD_CRITICAL[1]
        numbers = {
            "dead_rows": r["dead"],
            "live_rows": r["live"],
            "dead_ratio": float(r["dead_ratio"]),
            "last_vacuum": _when(r["last_vacuum"]),
            "last_autovacuum": _when(r["last_autovacuum"]),
            "last_analyze": _when(r["last_analyze"]),
            "last_autoanalyze": _when(r["last_autoanalyze"]),
        }
        if r["autovacuum_off"]:
            numbers["autovacuum_enabled"] = False
        findings.append(
            Finding(
                "table_bloat",
                "critical" if critical else "warning",
                f"{r['schema']}.{r['name']}",
                numbers,
                f"VACUUM (ANALYZE) {qualified(r['schema'], r['name'])};",
            )
        )
    note = "an estimate: dead rows counted by the statistics system since the last VACUUM"
    return Outcome("table_bloat", worst_first(findings), rows[0]["total"] if rows else 0, note)


async def freeze_age(conn: asyncpg.Connection, limit: int) -> Outcome:
    rows = await conn.fetch(FREEZE, limit, FREEZE_WARNING)
    findings = []
    for r in rows:
        database = r["kind"] == "database"
        findings.append(
            Finding(
                "freeze_age",
                "critical" if r["xid_age"] >= FREEZE_CRITICAL else "warning",
                r["name"] if database else f"{r['schema']}.{r['name']}",
                {
                    "kind": r["kind"],
                    "xid_age": r["xid_age"],
                    "autovacuum_freeze_max_age": r["xid_max"],
                    "mxid_age": r["mxid_age"],
                    "autovacuum_multixact_freeze_max_age": r["mxid_max"],
                    "wraparound_at": 2**31,
                },
                f"VACUUM (FREEZE, VERBOSE);  -- connected to database {quote_ident(r['name'])}"
                if database
                else f"VACUUM (FREEZE, VERBOSE) {qualified(r['schema'], r['name'])};",
            )
        )
    return Outcome("freeze_age", worst_first(findings), rows[0]["total"] if rows else 0)


def _sequence_fix(s: dict[str, object]) -> str:
    name = qualified(str(s["schema"]), str(s["name"]))
    feeds = s["feeds"]
    fixes = []
    if isinstance(feeds, dict) and feeds["type"] in ("smallint", "integer"):
        table = qualified(feeds["schema"], feeds["table"])
        column = quote_ident(feeds["column"])
        fixes.append(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE bigint;")
    if s["data_type"] != "bigint":
        fixes.append(f"ALTER SEQUENCE {name} AS bigint;")
    elif int(str(s["increment_by"])) > 0 and int(str(s["max_value"])) < _TYPE_MAX["bigint"]:
        fixes.append(f"ALTER SEQUENCE {name} NO MAXVALUE;")
    return " ".join(fixes)


async def sequences(conn: asyncpg.Connection, limit: int) -> Outcome:
    row = await conn.fetchrow(SEQUENCES, limit, SEQUENCE_WARNING)
    assert row is not None
    findings = []
    for s in decoded(row["found"]):
        numbers = {
            "data_type": s["data_type"],
            "last_value": s["last_value"],
            "max_value": s["max_value"] if s["increment_by"] > 0 else s["min_value"],
            "used_ratio": s["used"],
        }
        if s["feeds"]:
            feeds = s["feeds"]
            numbers["column"] = f"{feeds['schema']}.{feeds['table']}.{feeds['column']}"
            numbers["column_type"] = feeds["type"]
        findings.append(
            Finding(
                "sequences",
                "critical" if s["used"] >= SEQUENCE_CRITICAL else "warning",
                f"{s['schema']}.{s['name']}",
                numbers,
                _sequence_fix(s),
            )
        )
    note = ""
    if row["unreadable"]:
        note = (
            f"{row['unreadable']} sequences not checked: this role lacks SELECT or USAGE on "
            "them (PostgreSQL shows their last value only then)"
        )
    return Outcome("sequences", worst_first(findings), row["total"], note)


async def cache_hit(conn: asyncpg.Connection, limit: int) -> Outcome:
    row = await conn.fetchrow(CACHE, limit, CACHE_TABLE_MIN_READS, CACHE_TABLE_INFO)
    assert row is not None
    findings = []
    db = decoded(row["db"])
    total = row["total"]
    if db and db["hit"] + db["read"] >= CACHE_MIN_BLOCKS and db["ratio"] < CACHE_DB_WARNING:
        findings.append(
            Finding(
                "cache_hit",
                "critical" if db["ratio"] < CACHE_DB_CRITICAL else "warning",
                "database",
                {
                    "blocks_hit": db["hit"],
                    "blocks_read": db["read"],
                    "hit_ratio": db["ratio"],
                    "stats_since": db["stats_since"],
                },
                "",
            )
        )
        total += 1
    for t in decoded(row["tables"]):
        findings.append(
            Finding(
                "cache_hit",
                "info",
                f"{t['schema']}.{t['name']}",
                {k: v for k, v in t.items() if k not in ("schema", "name")},
                "",
            )
        )
    note = (
        "no statement fixes this: raise shared_buffers if the working set fits in memory, "
        "or find the reading queries with get_top_queries(sort_by='shared_blks_read')"
    )
    return Outcome("cache_hit", worst_first(findings), total, note if findings else "")


async def not_valid_constraints(conn: asyncpg.Connection, limit: int) -> Outcome:
    rows = await conn.fetch(NOT_VALID, limit)
    findings = [
        Finding(
            "not_valid_constraints",
            "info",
            f"{r['schema']}.{r['table_name']}.{r['name']}",
            {"table": r["table_name"], "kind": r["kind"]},
            f"ALTER TABLE {qualified(r['schema'], r['table_name'])} "
            f"VALIDATE CONSTRAINT {quote_ident(r['name'])};",
        )
        for r in rows
    ]
    note = "existing rows were never checked against these; new rows are"
    return Outcome("not_valid_constraints", findings, rows[0]["total"] if rows else 0, note)

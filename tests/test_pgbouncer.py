"""Through PgBouncer in transaction mode (issue 15, connection poolers): how most managed
PostgreSQL is reached. Session state does not hold there (shown first, with plain clients),
so the server detects the pooler and gives every statement a read-only transaction of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest
import pytest_asyncio
from mcpclient import call, call_error, connect, execute, fetch, records
from pgbed import PgServer
from wire import PgBouncer, pgbouncer

from pg_mcp_server.config import Settings
from pg_mcp_server.database.pool.engine import Database

SETUP = """
CREATE TABLE items (id int PRIMARY KEY, label text, price numeric(8, 2));
INSERT INTO items SELECT g, 'item ' || g, g * 1.5 FROM generate_series(1, 500) g;
CREATE TABLE parts (id int PRIMARY KEY, item_id int REFERENCES items (id));
INSERT INTO parts SELECT g, g FROM generate_series(1, 100) g;
ANALYZE;
"""


@pytest_asyncio.fixture(loop_scope="session")
async def bouncer(pg: PgServer) -> AsyncIterator[tuple[PgBouncer, str, str]]:
    """PgBouncer in front of a fresh database; yields it, the database's name and direct DSN."""
    db = await pg.create_database("bouncer")
    await execute(db.dsn, SETUP)
    async with pgbouncer(pg.admin_dsn, shared={"shared": db.name}) as running:
        yield running, db.name, db.dsn
    await pg.drop_database(db.name)


async def _plain(dsn: str) -> asyncpg.Connection:
    # Unnamed statements, as asyncpg's documentation asks for behind a transaction pooler.
    conn: asyncpg.Connection = await asyncpg.connect(dsn, statement_cache_size=0)
    return conn


async def test_session_state_does_not_hold_behind_a_transaction_pooler(
    bouncer: tuple[PgBouncer, str, str],
) -> None:
    """Why a session that is read-only by default is no guarantee here: PgBouncer hands one
    server connection to one client after another, so a session setting leaks to the next
    client, and another client can undo it, after which the first one writes."""
    running, _, direct = bouncer
    a, b = await _plain(running.dsn("shared")), await _plain(running.dsn("shared"))
    try:
        await a.execute("SET default_transaction_read_only = on")
        assert await b.fetchval("SHOW default_transaction_read_only") == "on"  # leaked to b
        await b.execute("SET default_transaction_read_only = off")
        await a.execute("CREATE TABLE written_anyway (id int)")  # a's "read-only" session
    finally:
        await a.close()
        await b.close()
    assert await fetch(direct, "SELECT 1 FROM pg_class WHERE relname = 'written_anyway'")
    await execute(direct, "DROP TABLE written_anyway")


async def test_the_pooler_is_detected_and_every_statement_is_read_only(
    bouncer: tuple[PgBouncer, str, str],
) -> None:
    running, _, direct = bouncer
    direct_db = Database(Settings.load(database={"dsn": direct}).database)
    pooled_db = Database(Settings.load(database={"dsn": running.dsn("shared")}).database)
    other = await _plain(running.dsn("shared"))
    try:
        await direct_db.ping()
        await pooled_db.ping()
        assert direct_db.pooled is False and pooled_db.pooled is True
        # Another client leaves the one server connection read-write by default: every way
        # the server uses a connection still refuses writes past the guard.
        await other.execute("SET default_transaction_read_only = off")
        for use in (pooled_db.session, pooled_db.read_only):
            for sql in ("CREATE TABLE sneaky (id int)", "DELETE FROM items"):
                async with use() as conn:
                    with pytest.raises(asyncpg.ReadOnlySQLTransactionError):
                        await conn.execute(sql)
        async with pooled_db.read_only(timeout_ms=1234) as conn:
            assert await conn.fetchval("SHOW statement_timeout") == "1234ms"
    finally:
        await other.close()
        await direct_db.dispose()
        await pooled_db.dispose()
    assert (await fetch(direct, "SELECT count(*) AS n FROM items"))[0]["n"] == 500
    assert not await fetch(direct, "SELECT 1 FROM pg_class WHERE relname = 'sneaky'")


async def test_every_tool_works_through_pgbouncer(bouncer: tuple[PgBouncer, str, str]) -> None:
    """Calls share two server connections between five pooled client connections and run
    concurrently: no prepared statement may be missing or left behind, nothing stays open."""
    running, name, direct = bouncer
    async with connect(running.dsn(name)) as client:
        listed = await call(client, "list_tables")
        assert {t["name"] for t in listed["tables"]} == {"items", "parts"}
        described = await call(client, "describe_table", table_name="parts")
        assert described["columns"][1]["foreign_key"]["referenced_table"] == "items"
        path = await call(client, "find_join_path", from_table="parts", to_table="items")
        assert path["paths"][0]["depth"] == 1

        async def query(i: int) -> None:
            out = await call(
                client,
                "execute_query",
                sql="SELECT id, label, price FROM items WHERE id <= $1 ORDER BY id DESC",
                params=[i],
                limit=3,
                timeout_ms=5000 if i % 2 else None,
            )
            assert out["rows"][0] == [i, f"item {i}", i * 1.5]

        await asyncio.gather(*(query(i) for i in range(5, 45)))
        sample = await call(client, "get_sample_rows", table_name="items", limit=2)
        assert [r["id"] for r in records(sample)] == [1, 2]
        plan = await call(client, "explain_query", sql="SELECT * FROM items", analyze=True)
        assert plan["plan"].startswith("Seq Scan on items")
        body = await call_error(client, "execute_query", sql="SELECT * FROM nowhere")
        assert body["error"]["code"] == "TABLE_NOT_FOUND"
        body = await call_error(client, "execute_query", sql="DELETE FROM items")
        assert body["error"]["code"] == "WRITE_OPERATION_DENIED"
        counted = await call(client, "execute_query", sql="SELECT count(*) AS n FROM items")
        assert records(counted) == [{"n": 500}]
    idle = await fetch(
        direct,
        "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = $1 "
        "AND state LIKE 'idle in transaction%'",
        name,
    )
    assert idle[0]["n"] == 0

"""Layer 3 mechanics: limits, timeouts, cancellation, pool reset, parameters, plans, audit."""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import asyncpg
import pytest
import pytest_asyncio
from eventually import eventually
from mcp import Client
from mcpclient import call, call_error, connect, execute, fetch, held_client, module_database
from pgbed import PgServer

from pg_mcp_server.__main__ import preflight
from pg_mcp_server.config import Settings
from pg_mcp_server.database.guard.gate import SqlGuard
from pg_mcp_server.database.pool.engine import Database
from pg_mcp_server.database.rows.output import Budget
from pg_mcp_server.database.rows.reader import Reader
from pg_mcp_server.errors import ParameterError

SETUP = r"""
CREATE TABLE items (id int PRIMARY KEY, label text, price numeric(8, 2), tags text[]);
INSERT INTO items SELECT g, 'item ' || g, g * 1.5, ARRAY['t' || g % 3]
FROM generate_series(1, 30000) g;
ANALYZE items;
CREATE TABLE stale (id int, v int) WITH (autovacuum_enabled = false);
INSERT INTO stale SELECT g, g FROM generate_series(1, 10) g;
ANALYZE stale;
INSERT INTO stale SELECT g, g % 7 FROM generate_series(11, 50000) g;
CREATE TABLE accounts (id int PRIMARY KEY, api_secret text);
INSERT INTO accounts VALUES (1, 's3cr3t');
"""


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def qdsn(pg: PgServer) -> AsyncIterator[str]:
    """One database for the module (80,000 rows to load): the tests here only read it, or
    leave nothing behind (a role they drop); a test that writes gets a database of its own."""
    async with module_database(pg, "query_tools", SETUP) as dsn:
        yield dsn


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def served(qdsn: str) -> AsyncIterator[Client]:
    """One server for the corpora of parameters, one call per case."""
    async with held_client(qdsn) as client:
        yield client


async def test_rows_columns_and_types(qdsn: str) -> None:
    async with connect(qdsn) as client:
        out = await call(
            client,
            "execute_query",
            sql="SELECT id, label, price, tags, now() AS at, '1 mon'::interval AS iv, "
            "'\\x00ff'::bytea AS b, 'NaN'::numeric AS nan FROM items WHERE id <= $1 ORDER BY id",
            params=[2],
        )
    assert [c["name"] for c in out["columns"]] == [
        "id",
        "label",
        "price",
        "tags",
        "at",
        "iv",
        "b",
        "nan",
    ]
    types = {c["name"]: c["data_type"] for c in out["columns"]}
    assert types["id"] == "integer" and types["tags"] == "text[]" and types["at"] == "timestamptz"
    first, second = out["rows"]
    assert first[:4] == [1, "item 1", 1.5, ["t1"]] and second[3] == ["t2"]
    assert first[5] == "1 mon" and first[7] == "NaN"
    assert base64.b64decode(first[6]) == b"\x00\xff"
    assert out["row_count"] == 2 and out["has_more"] is False
    assert len(out["query_hash"]) == 16 and out["execution_time_ms"] >= 0


async def test_limit_and_has_more(qdsn: str) -> None:
    async with connect(qdsn) as client:
        out = await call(client, "execute_query", sql="SELECT id FROM items ORDER BY id", limit=5)
        assert out["rows"] == [[1], [2], [3], [4], [5]]
        assert out["has_more"] is True and "more rows exist" in out["note"]
        exact = await call(client, "execute_query", sql="SELECT id FROM items LIMIT 5", limit=5)
        assert exact["has_more"] is False
        # The row limit reaches the statement: the 900 million rows of this cross join are
        # never produced (a set-returning function in FROM would be materialised whole by
        # PostgreSQL itself, so a join is the honest test).
        huge = await call(
            client,
            "execute_query",
            sql="SELECT a.id AS x, b.id AS y FROM items a CROSS JOIN items b",
            limit=10000,
            timeout_ms=5000,
        )
        assert huge["total_rows"] == 10000 and huge["has_more"] is True
        body = await call_error(client, "execute_query", sql="SELECT 1", limit=1_000_001)
        assert body["error"]["code"] == "PARAMETER_ERROR"


async def test_server_caps_rows_and_bytes(qdsn: str) -> None:
    async with connect(qdsn, max_rows=7) as client:
        out = await call(client, "execute_query", sql="SELECT id FROM items", limit=1000)
        assert out["row_count"] == 7 and out["has_more"] is True
    async with connect(qdsn, max_result_bytes=2048) as client:
        out = await call(client, "execute_query", sql="SELECT id, label FROM items ORDER BY id")
        assert 0 < out["row_count"] < 200 and out["has_more"] is True
        assert "2048-byte result limit" in out["note"]


async def test_duplicate_names_and_redaction(qdsn: str) -> None:
    async with connect(qdsn) as client:
        out = await call(
            client,
            "execute_query",
            sql="SELECT a.id, b.id, a.api_secret FROM accounts a, accounts b",
        )
    assert [c["name"] for c in out["columns"]] == ["id", "id", "api_secret"]
    assert out["rows"] == [[1, 1, "[REDACTED]"]]
    assert out["note"] == "redacted sensitive columns: api_secret"


PARAM_CASES: list[tuple[str, Any, Any]] = [
    ("SELECT $1::int AS v", 41, 41),
    ("SELECT $1::int AS v", "41", 41),
    ("SELECT $1::bigint AS v", "9007199254740993", 9007199254740993),
    ("SELECT $1::numeric AS v", "12.345", 12.345),
    ("SELECT $1::float8 AS v", 0.25, 0.25),
    ("SELECT $1::text AS v", "1; DROP TABLE items", "1; DROP TABLE items"),
    ("SELECT $1::bool AS v", True, True),
    ("SELECT $1::date AS v", "2024-02-29", "2024-02-29"),
    ("SELECT $1::timestamptz AS v", "2024-01-01T10:00:00Z", "2024-01-01T10:00:00+00:00"),
    (
        "SELECT $1::uuid AS v",
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
    ),
    ("SELECT $1::jsonb AS v", {"a": [1, None]}, {"a": [1, None]}),
    ("SELECT $1::int[] AS v", [1, 2, None], [1, 2, None]),
    ("SELECT $1::text[] AS v", ["a", "b"], ["a", "b"]),
    ("SELECT $1::interval AS v", "2 days", "2 days"),
    ("SELECT $1::int AS v", None, None),
    ("SELECT count(*) AS v FROM items WHERE label = $1", "item 7", 1),
]


@pytest.mark.parametrize(("sql", "value", "expected"), PARAM_CASES)
async def test_parameter_types_round_trip(
    served: Client, sql: str, value: Any, expected: Any
) -> None:
    out = await call(served, "execute_query", sql=sql, params=[value])
    assert out["rows"] == [[expected]]


@pytest.mark.parametrize(
    ("sql", "params", "fragment"),
    [
        ("SELECT $1::int", ["forty"], "$1"),
        ("SELECT $1::int, $2::date", [1, "yesterday"], "$2"),
        ("SELECT $1::int", [], "1 parameter"),
        ("SELECT 1", [1], "0 parameter"),
        ("SELECT $1::uuid", ["not-a-uuid"], "$1"),
        ("SELECT $1::int[]", [5], "$1"),
        ("SELECT $1::bool", [{"x": 1}], "$1"),
    ],
)
async def test_parameter_errors_name_the_parameter(
    served: Client, sql: str, params: list[Any], fragment: str
) -> None:
    body = await call_error(served, "execute_query", sql=sql, params=params)
    assert body["error"]["code"] == "PARAMETER_ERROR"
    assert fragment in body["error"]["message"]


async def test_timeout_is_prompt_and_the_connection_is_reused(qdsn: str) -> None:
    async with connect(qdsn) as client:
        body = await call_error(client, "execute_query", sql="SELECT pg_sleep(10)", timeout_ms=300)
        assert body["error"]["code"] == "QUERY_TIMEOUT"
        assert body["error"]["context"]["timeout_ms"] == 300
        assert (await call(client, "execute_query", sql="SELECT 1 AS x"))["rows"] == [[1]]


async def test_callers_cannot_raise_the_server_timeout(qdsn: str) -> None:
    settings_env = {"statement_timeout": 1000}
    settings = Settings.load(database={"dsn": qdsn, **settings_env})
    db = Database(settings.database)
    try:
        assert db.timeout_ms(60000) == 1000 and db.timeout_ms(200) == 200
        assert db.timeout_ms(None) == 1000
    finally:
        await db.dispose()


async def _backends(dsn: str, state: str) -> list[str]:
    rows = await fetch(
        dsn,
        "SELECT query FROM pg_stat_activity WHERE application_name = 'pg-mcp-server' "
        "AND state = $1",
        state,
    )
    return [r["query"] for r in rows]


async def test_cancelled_call_cancels_the_backend_query(qdsn: str) -> None:
    async with connect(qdsn) as client:
        # Cancelled once its query runs (rather than after a second it always waited out).
        with anyio.CancelScope() as call_scope:

            async def cancel_when_running() -> None:
                async def running() -> bool:
                    return any("pg_sleep(30)" in q for q in await _backends(qdsn, "active"))

                await eventually(running, what="the call's query running")
                call_scope.cancel()

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(cancel_when_running)
                await client.call_tool("execute_query", {"sql": "SELECT pg_sleep(30)"})
        assert call_scope.cancelled_caught

        async def cancelled() -> bool:
            return not await _backends(qdsn, "active")

        await eventually(cancelled, what="no active backend left", seconds=4)
        assert (await call(client, "execute_query", sql="SELECT 2 AS x"))["rows"] == [[2]]


async def test_connections_are_reset_before_reuse(qdsn: str) -> None:
    """What a rollback keeps (advisory locks, session settings, LISTEN) must not survive."""
    settings = Settings.load(database={"dsn": qdsn, "pool_size": 1})
    db = Database(settings.database)
    try:
        async with db.read_only(timeout_ms=1234) as conn:
            assert await conn.fetchval("SHOW statement_timeout") == "1234ms"
            # Bypassing the guard on purpose: this checks the backstop behind it.
            await conn.fetchval("SELECT pg_advisory_lock(4242)")
            await conn.fetchval("SELECT set_config('search_path', 'nowhere', false)")
            await conn.fetchval("SELECT set_config('default_transaction_read_only', 'off', false)")
            await conn.execute("LISTEN leak")
            pid = await conn.fetchval("SELECT pg_backend_pid()")
        async with db.read_only() as conn:
            assert await conn.fetchval("SELECT pg_backend_pid()") == pid  # same connection
            assert await conn.fetchval("SHOW search_path") == '"$user", public'
            assert await conn.fetchval("SELECT count(*) FROM pg_listening_channels()") == 0
            assert await conn.fetchval("SHOW transaction_read_only") == "on"
            assert await conn.fetchval("SHOW statement_timeout") == "30s"
        rows = await fetch(qdsn, "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory'")
        assert rows[0]["n"] == 0
    finally:
        await db.dispose()


async def test_every_way_of_using_a_connection_refuses_writes_past_the_guard(qdsn: str) -> None:
    """The backstop behind the guard: SQL a caller wrote runs read-only, alone in the session's
    implicit read-only transaction (read_only()), or in BEGIN READ ONLY (read_only(explicit)
    or with a lower timeout); our own statements likewise (session()). None can be switched to
    read-write from inside, or for the next user of the connection."""
    settings = Settings.load(database={"dsn": qdsn, "pool_size": 1})
    db = Database(settings.database)
    writes = (
        "CREATE TABLE public.sneaky (id int)",
        "INSERT INTO public.items VALUES (-1, 'x', 1, NULL)",
        "SELECT set_config('transaction_read_only', 'off', true), "
        "(SELECT count(*) FROM public.items)",
    )
    uses: tuple[Callable[[], AbstractAsyncContextManager[asyncpg.Connection]], ...] = (
        db.read_only,
        lambda: db.read_only(explicit=True),
        lambda: db.read_only(timeout_ms=5000),
        db.session,
    )
    try:
        for use in uses:
            for sql in writes:
                async with use() as conn:
                    with pytest.raises(asyncpg.PostgresError):
                        await conn.execute(sql)
            async with use() as conn:
                # Bypassing the guard on purpose: the reset undoes it before the next use.
                await conn.execute("SET default_transaction_read_only = off")
                await conn.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE")
            async with db.session() as conn:
                assert await conn.fetchval("SHOW transaction_read_only") == "on"
                with pytest.raises(asyncpg.ReadOnlySQLTransactionError):
                    await conn.execute("DELETE FROM public.items")
    finally:
        await db.dispose()
    assert (await fetch(qdsn, "SELECT count(*) AS n FROM items"))[0]["n"] == 30000


async def test_a_lower_timeout_runs_the_query_in_an_explicit_transaction(qdsn: str) -> None:
    """A caller's lower timeout_ms is a SET LOCAL in BEGIN READ ONLY (SET LOCAL has no effect
    outside a transaction block, so seeing its value proves the block is open); without one,
    the query runs alone under the session's timeout."""
    padding = "x" * 16000  # a long statement is prepared and kept like a short one
    queries = (
        "SELECT current_setting('statement_timeout') AS t, "
        "current_setting('transaction_read_only') AS ro",
        f"SELECT current_setting('statement_timeout') AS t, "
        f"current_setting('transaction_read_only') AS ro, length('{padding}') AS n",
    )
    async with connect(qdsn) as client:
        for sql in queries:
            for timeout_ms in (1234, 2345, None, 30000):
                body = await call(client, "execute_query", sql=sql, timeout_ms=timeout_ms)
                expected = f"{timeout_ms}ms" if timeout_ms and timeout_ms < 30000 else "30s"
                assert body["rows"][0][:2] == [expected, "on"]
        for sql in queries:  # and what PostgreSQL refuses leaves the next call unharmed
            body = await call_error(client, "execute_query", sql=sql + " FROM nowhere")
            assert body["error"]["code"] == "TABLE_NOT_FOUND"
            body = await call(client, "execute_query", sql=sql, timeout_ms=1500)
            assert body["rows"][0][0] == "1500ms"


async def _no_session_left_in_a_transaction(dsn: str) -> None:
    """Once the background reset of the last use is done (it rolls back first), no session of
    the server is in a transaction or holds a transaction ID."""

    async def none() -> bool:
        rows = await fetch(
            dsn,
            "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = 'pg-mcp-server' "
            "AND (state LIKE 'idle in transaction%' OR backend_xid IS NOT NULL)",
        )
        return bool(rows[0]["n"] == 0)

    await eventually(none, what="no session of the server left in a transaction", seconds=5)


async def test_a_cancelled_or_refused_call_never_leaves_a_transaction_open(qdsn: str) -> None:
    """A call cancelled at any point (inside BEGIN, the statement, or in between), or refused
    for a parameter before anything ran, leaves the session rolled back (or dropped), never
    idle in a transaction."""
    settings = Settings.load(database={"dsn": qdsn, "pool_size": 1})
    db = Database(settings.database)
    reader = Reader(db, SqlGuard(), Budget(rows=2, bytes=10_000), sensitive=None)

    def work(sql: str, params: list[Any] | None = None) -> Any:
        return lambda conn: reader.fetch(conn, sql, params, limit=2)

    count = work("SELECT count(*) FROM items")
    try:
        await db.run(count)
        for i in range(40):
            timeout = 5000 if i % 2 else None  # with and without the explicit BEGIN
            task = asyncio.create_task(db.run(count, timeout))
            for _ in range(i % 8 + 1):
                await asyncio.sleep(0)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await _no_session_left_in_a_transaction(qdsn)
            async with db.session() as conn:
                assert not conn.is_in_transaction()
        with pytest.raises(ParameterError):
            await db.run(work("SELECT $1::int4", [2**40]), 5000)
        await _no_session_left_in_a_transaction(qdsn)
        assert (await db.run(count)).rows == [[30000]]
    finally:
        await db.dispose()
    await _no_session_left_in_a_transaction(qdsn)


async def test_a_left_over_prepared_statement_discards_the_session(qdsn: str) -> None:
    """A session where SQL-level PREPARE left a statement (past the guard) is not reused."""
    settings = Settings.load(database={"dsn": qdsn, "pool_size": 1})
    db = Database(settings.database)
    try:
        async with db.read_only() as conn:
            await conn.execute("PREPARE left_behind AS SELECT 1")  # bypassing the guard
            pid = await conn.fetchval("SELECT pg_backend_pid()")
        async with db.session() as conn:
            assert await conn.fetchval("SELECT pg_backend_pid()") != pid
            assert (
                await conn.fetchval("SELECT count(*) FROM pg_prepared_statements WHERE from_sql")
                == 0
            )
    finally:
        await db.dispose()


async def test_a_repeated_query_sees_the_table_change(scratch_dsn: str) -> None:
    """Repeated SQL runs from kept statements; a column added, retyped or dropped since must
    not break it, nor leave a stale column out (PostgreSQL refuses the kept statement, and the
    call runs again once)."""
    qdsn = scratch_dsn  # the test changes a table: not in the module's shared database
    await execute(qdsn, "CREATE TABLE shifting (a int); INSERT INTO shifting VALUES (1)")
    sql = "SELECT * FROM shifting"
    async with connect(qdsn, pool_size=1) as client:
        for _ in range(3):
            assert (await call(client, "execute_query", sql=sql))["rows"] == [[1]]
        await execute(qdsn, "ALTER TABLE shifting ADD COLUMN b text DEFAULT 'new'")
        assert (await call(client, "execute_query", sql=sql))["rows"] == [[1, "new"]]
        await execute(qdsn, "ALTER TABLE shifting ALTER COLUMN a TYPE bigint")
        body = await call(client, "execute_query", sql=sql)
        assert body["rows"] == [[1, "new"]]
        assert [c["data_type"] for c in body["columns"]] == ["bigint", "text"]
        await execute(qdsn, "ALTER TABLE shifting DROP COLUMN a")
        body = await call(client, "execute_query", sql=sql)
        assert body["rows"] == [["new"]] and body["columns"][0]["name"] == "b"


async def test_a_killed_backend_is_one_log_line_and_no_failed_call(
    qdsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An administrator terminating the server's sessions is routine: the next call is
    answered, and the engine logs one bounded line per discarded connection; nothing (ours,
    SQLAlchemy's pool, asyncpg's) logs a traceback or a warning."""
    caplog.set_level(logging.DEBUG)
    async with connect(qdsn) as client:
        await asyncio.gather(*(call(client, "execute_query", sql="SELECT 1") for _ in range(3)))
        killed = await fetch(
            qdsn,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'pg-mcp-server' AND datname = current_database()",
        )
        assert killed and all(r[0] for r in killed)
        for _ in range(4):
            assert (await call(client, "execute_query", sql="SELECT 2"))["rows"] == [[2]]
    ours = [r for r in caplog.records if r.name == "pg_mcp_server.database.pool.engine"]
    discarded = [r for r in ours if "discarding a pooled connection" in r.getMessage()]
    assert 1 <= len(discarded) <= len(killed)
    assert all(r.levelno <= logging.INFO and len(r.getMessage()) <= 200 for r in ours)
    for record in caplog.records:
        assert record.exc_info is None and "\n" not in record.getMessage(), record.name
        # (The start-up privilege audit warns about the superuser the tests connect as.)
        if record.module != "audit":
            assert record.levelno < logging.WARNING, (record.name, record.getMessage())


async def test_explain_formats_and_warnings(qdsn: str) -> None:
    async with connect(qdsn) as client:
        text = await call(client, "explain_query", sql="SELECT * FROM items WHERE label = 'x'")
        assert text["format"] == "text" and text["plan"].startswith("Seq Scan on items")
        assert text["estimated_cost"] > 0 and text["estimated_rows"] >= 1
        assert text["actual_time_ms"] is None
        assert any("Sequential scan on 'items'" in w and "label" in w for w in text["warnings"])
        indexed = await call(
            client, "explain_query", sql="SELECT * FROM items WHERE id = $1", params=[5]
        )
        assert indexed["warnings"] is None

        js = await call(
            client,
            "explain_query",
            sql="SELECT count(*) FROM stale WHERE v = 3",
            format="json",
            analyze=True,
            buffers=True,
        )
        assert isinstance(js["plan"], list) and "Plan" in js["plan"][0]
        assert js["actual_time_ms"] is not None and js["actual_time_ms"] >= 0
        assert any("Row estimate off by" in w for w in js["warnings"])

        yml = await call(client, "explain_query", sql="SELECT 1", format="yaml", verbose=True)
        assert isinstance(yml["plan"], str) and "Plan:" in yml["plan"]

        body = await call_error(client, "explain_query", sql="SELECT 1", buffers=True)
        assert body["error"]["code"] == "PARAMETER_ERROR"
        body = await call_error(client, "explain_query", sql="SELECT 1", format="xml")
        assert body["error"]["code"] == "PARAMETER_ERROR"
        body = await call_error(client, "explain_query", sql="SELECT * FROM items WHERE id = $1")
        assert body["error"]["code"] == "PARAMETER_ERROR"
        body = await call_error(client, "explain_query", sql="DELETE FROM items", analyze=True)
        assert body["error"]["code"] == "WRITE_OPERATION_DENIED"
    (count,) = await fetch(qdsn, "SELECT count(*) FROM items")
    assert count[0] == 30000


async def test_unknown_table_in_a_query_suggests_names(qdsn: str) -> None:
    async with connect(qdsn) as client:
        body = await call_error(client, "execute_query", sql="SELECT * FROM itemz")
    assert body["error"]["code"] == "TABLE_NOT_FOUND"
    assert "Did you mean 'items'" in body["error"]["suggestion"]


async def test_comment_keywords_can_be_allowed(qdsn: str) -> None:
    sql = "SELECT 1 AS x -- update: counts fixed"
    async with connect(qdsn) as client:
        body = await call_error(client, "execute_query", sql=sql)
        assert body["error"]["context"]["rule"] == "keyword_in_comment"
    async with connect(qdsn, block_keywords_in_comments=False) as client:
        assert (await call(client, "execute_query", sql=sql))["rows"] == [[1]]


async def test_privilege_audit(qdsn: str) -> None:
    superuser = await preflight(Settings.load(database={"dsn": qdsn}))
    assert any("superuser" in w for w in superuser)
    assert any("can write to" in w for w in superuser)
    role = f"reader_{os.getpid()}"
    await execute(
        qdsn,
        f"CREATE ROLE {role} LOGIN; GRANT USAGE ON SCHEMA public TO {role}; "
        f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role};",
    )
    try:
        host = qdsn.split("@", 1)[1]
        reader = await preflight(Settings.load(database={"dsn": f"postgresql://{role}@{host}"}))
        assert reader == []
    finally:
        await execute(qdsn, f"DROP OWNED BY {role}; DROP ROLE {role};")


def test_refuses_to_start_with_a_superuser_when_asked(demo_dsn: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG_", "MCP_"))}
    env["MCP_REQUIRE_READ_ONLY_ROLE"] = "true"
    proc = subprocess.run(
        [sys.executable, "-m", "pg_mcp_server", "--dsn", demo_dsn],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 3
    assert "refusing to start" in proc.stderr and "superuser" in proc.stderr
    assert proc.stdout == ""

"""A pooled session goes back to exactly its first state after every use (issue 19, findings 3
and 4): the login role and session authorization, no advisory lock, no LISTEN, no prepared
statement; directly, for custom tools, and behind a real PgBouncer in transaction mode.

The state a guard bypass could leave is made here without a bypass: the test runs the
statements itself through the engine's own API (or an operator's custom tool), then shows that
the next use of the same backend sees none of it.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
import pytest_asyncio
from customdefs import serve
from mcpclient import call, execute, fetch, records
from pgbed import PgServer
from wire import pgbouncer

from pg_mcp_server.config import Settings
from pg_mcp_server.database.pool.engine import Database

LOW = "pgmcp_reset_low"
# What a later use must see: the login role, nothing held, nothing listened to.
STATE = """
SELECT pg_backend_pid() AS pid, current_user AS "current", session_user AS "session",
       current_setting('role') AS role, current_setting('work_mem') AS work_mem,
       current_setting('transaction_read_only') AS read_only,
       (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
        AND pid = pg_backend_pid()) AS advisory_locks,
       ARRAY(SELECT pg_listening_channels()) AS channels,
       (SELECT count(*) FROM pg_prepared_statements WHERE from_sql) AS prepared,
       (SELECT count(*) FROM pg_cursors WHERE name <> '') AS cursors
"""
# Left behind by one use, each the way a statement that got past the guard could leave it.
LEFTOVERS = {
    "set_config-role": f"SELECT set_config('role', '{LOW}', false)",
    "set-role": f"SET ROLE {LOW}",
    "session-authorization": f"SET SESSION AUTHORIZATION {LOW}",
    "session-authorization-and-role": f"SELECT set_config('session_authorization', '{LOW}', "
    "false), set_config('role', 'none', false)",
    "setting": "SELECT set_config('work_mem', '77kB', false)",
    "advisory-lock": "SELECT pg_advisory_lock(42)",
    "advisory-lock-as-low": f"SET ROLE {LOW}; SELECT pg_advisory_lock(43)",
    "listen": "LISTEN pgmcp_reset",
    "cursor": "DECLARE pgmcp_c CURSOR WITH HOLD FOR SELECT 1",
}


@pytest_asyncio.fixture(loop_scope="session")
async def low_role(scratch_dsn: str) -> AsyncIterator[str]:
    await execute(
        scratch_dsn,
        f"DO $$ BEGIN CREATE ROLE {LOW}; EXCEPTION WHEN duplicate_object THEN NULL; END $$",
    )
    yield scratch_dsn


def _database(dsn: str, **database: object) -> Database:
    return Database(Settings.load(database={"dsn": dsn, "pool_size": 1, **database}).database)


async def _state(db: Database) -> dict[str, object]:
    async with db.session() as conn:
        row = await conn.fetchrow(STATE)
    assert row is not None
    return dict(row)


def _first_state(state: dict[str, object], login: str) -> None:
    assert state["current"] == login and state["session"] == login, state
    assert state["role"] == "none" and state["work_mem"] == "4MB", state
    assert state["read_only"] == "on", state
    assert state["advisory_locks"] == 0 and state["channels"] == [], state
    assert state["prepared"] == 0 and state["cursors"] == 0, state


@pytest.mark.parametrize("leftover", LEFTOVERS.values(), ids=LEFTOVERS.keys())
async def test_the_next_use_of_the_session_starts_afresh(low_role: str, leftover: str) -> None:
    db = _database(low_role)
    try:
        before = await _state(db)
        async with db.read_only() as conn:
            await conn.execute(leftover)
            left = dict(await conn.fetchrow(STATE) or {})
        # The leftover really was there when the use ended (so this test can fail).
        assert left != {**before, "pid": left["pid"]}, left
        after = await _state(db)
        assert after["pid"] == before["pid"] == left["pid"]  # the same backend, reset
        _first_state(after, str(before["session"]))
    finally:
        await db.dispose()


async def test_the_reset_works_for_a_role_that_is_not_a_superuser(low_role: str) -> None:
    """SET SESSION AUTHORIZATION DEFAULT is allowed for any role: a plain login role's session
    is reset, not discarded, and a role it switched to is undone."""
    reader = f"pgmcp_reset_reader_{os.getpid()}"
    await execute(low_role, f"CREATE ROLE {reader} LOGIN IN ROLE {LOW}")
    parts = urlsplit(low_role)
    dsn = urlunsplit(parts._replace(netloc=f"{reader}@{parts.netloc.rsplit('@', 1)[-1]}"))
    db = _database(dsn)
    try:
        before = await _state(db)
        async with db.read_only() as conn:
            await conn.execute(f"SELECT set_config('role', '{LOW}', false), pg_advisory_lock(7)")
        after = await _state(db)
        assert after["pid"] == before["pid"]
        _first_state(after, reader)
    finally:
        await db.dispose()
        await execute(low_role, f"DROP ROLE {reader}")


async def test_a_statement_left_prepared_discards_the_session(low_role: str) -> None:
    """DEALLOCATE ALL would drop the driver's statements too: such a session is replaced."""
    db = _database(low_role)
    try:
        before = await _state(db)
        async with db.read_only() as conn:
            await conn.execute("PREPARE pgmcp_left AS SELECT 1")
        after = await _state(db)
        assert after["pid"] != before["pid"]
        _first_state(after, str(before["session"]))
    finally:
        await db.dispose()


@pytest.mark.parametrize(
    "leave",
    [
        "CREATE TEMP TABLE orders (id int)",  # would shadow public.orders for the next caller
        "CREATE TYPE pg_temp.mood AS ENUM ('x')",
        "CREATE FUNCTION pg_temp.f() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    ],
    ids=["table", "type", "function"],
)
async def test_a_temporary_object_left_behind_discards_the_session(
    low_role: str, leave: str
) -> None:
    """Temporary objects are not dropped by the reset (a custom pl-func tool's function is
    kept, so that its read-only calls create nothing); any other one gets the session
    replaced."""
    db = _database(low_role)
    try:
        before = await _state(db)
        async with db.read_only(explicit=True) as conn:
            await conn.execute("COMMIT; BEGIN READ WRITE")  # a write, as a bypass would make
            await conn.execute(leave)
            await conn.execute("COMMIT; BEGIN READ ONLY")
        after = await _state(db)
        assert after["pid"] != before["pid"]
        _first_state(after, str(before["session"]))
    finally:
        await db.dispose()


CUSTOM = f"""
tools:
  - name: take_lock
    type: sql
    description: Takes a session advisory lock, as a read-only tool.
    input_schema: {{type: object, properties: {{}}}}
    sql: SELECT pg_backend_pid() AS pid, pg_advisory_lock(42)::text AS locked
  - name: become_low
    type: sql
    description: Switches the session's role and commits (a write tool).
    allow_writes: true
    input_schema: {{type: object, properties: {{}}}}
    sql: SELECT pg_backend_pid() AS pid, set_config('role', '{LOW}', false) AS role
"""


async def test_custom_tools_are_reset_too(
    low_role: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A custom tool runs on a pooled session like any other call: an advisory lock survives
    its ROLLBACK, a role set by a write tool survives its COMMIT; neither reaches the next
    call on that session."""
    monkeypatch.setenv("PG_POOL_SIZE", "1")
    (login,) = await fetch(low_role, "SELECT current_user AS u")
    async with serve(low_role, tmp_path, CUSTOM, allow_write_tools=True) as client:
        for tool in ("take_lock", "become_low"):
            (used,) = records(await call(client, tool))  # rows are arrays, as execute_query's
            out = await call(
                client,
                "execute_query",
                sql="SELECT pg_backend_pid() AS pid, current_user AS u, session_user AS s, "
                "(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory') AS locks",
            )
            assert records(out) == [
                {"pid": used["pid"], "u": login["u"], "s": login["u"], "locks": 0}
            ]


@pytest.mark.parametrize("leftover", LEFTOVERS.values(), ids=LEFTOVERS.keys())
async def test_behind_pgbouncer_nothing_outlives_the_transaction(
    pg: PgServer, low_role: str, leftover: str
) -> None:
    """PgBouncer (transaction mode, one server connection) runs no reset: whatever a statement
    leaves is cleared in its own transaction, also when the statement then fails, and after
    the server has gone nothing is held by PgBouncer's server connection."""
    name = urlsplit(low_role).path.lstrip("/")
    async with pgbouncer(pg.admin_dsn, shared={"one": name}) as running:
        db = _database(running.dsn("one"))
        try:
            before = await _state(db)
            assert db.pooled is True
            for failing in (False, True):
                async with db.read_only() as conn:
                    await conn.execute(leftover)
                    left = dict(await conn.fetchrow(STATE) or {})
                    # (A LISTEN takes effect at commit: pg_listening_channels() shows it
                    # only then.)
                    assert "LISTEN" in leftover or left != {**before, "pid": left["pid"]}
                    if failing:
                        with pytest.raises(asyncpg.DivisionByZeroError):
                            await conn.execute("SELECT 1 / 0")
                after = await _state(db)
                assert after["pid"] == before["pid"]  # PgBouncer's one server connection
                _first_state(after, str(before["session"]))
        finally:
            await db.dispose()
        held = await fetch(
            low_role,
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND database = "
            "(SELECT oid FROM pg_database WHERE datname = current_database())",
        )
        assert held == []


async def test_behind_pgbouncer_a_prepared_statement_closes_the_server_connection(
    pg: PgServer, low_role: str
) -> None:
    """A statement prepared from SQL outlives ROLLBACK and cannot be dropped without dropping
    others' (DEALLOCATE ALL): the transaction is left open and the client goes, so PgBouncer
    closes that server connection."""
    name = urlsplit(low_role).path.lstrip("/")
    async with pgbouncer(pg.admin_dsn, shared={"one": name}) as running:
        db = _database(running.dsn("one"))
        try:
            before = await _state(db)
            async with db.read_only() as conn:
                await conn.execute("DO $$ BEGIN EXECUTE 'PREPARE pgmcp_left AS SELECT 1'; END $$")
            after = await _state(db)
            assert after["pid"] != before["pid"]
            _first_state(after, str(before["session"]))
        finally:
            await db.dispose()

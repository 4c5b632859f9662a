"""The guard's verdict holds until the statement ends (issue 19, finding 1): a second session
of an unprivileged role, racing the server, changes what a statement reads in a transaction it
has not committed; the server's call waits on that session's lock (each test first sees it
waiting, so the window was really entered), the attacker commits, and the call must be
refused, never run the attacker's code. Proof that it did not: the refusal names the planted
function, no transaction ID was consumed and rolled back (the planted function takes one),
and no NOTIFY arrived.

The relations raced are the application owner's, a role the server trusts, changed by a session
of that owner (`changer`): relations of a role that is not trusted are refused outright (their
owner could add code to them at any moment, test_guard_objects.py `owned_*`), as is a trusted
role another role may act as (a member of it, attack3 F16), so what the locks must keep out is
a trusted relation changed, during the wait, to reach code of a role that is not trusted
(`atk.evil()`, the untrusted role's)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from eventually import eventually
from mcp import Client, MCPError
from mcpclient import call, call_error, execute, fetch, records
from pgbed import PgServer
from wire import pgbouncer

from pg_mcp_server.config import Settings
from pg_mcp_server.server import build_server

SETUP = """
CREATE ROLE {atk} LOGIN;
CREATE ROLE {owner} LOGIN;
CREATE ROLE {reader} LOGIN;
CREATE SCHEMA atk AUTHORIZATION {atk};
GRANT USAGE ON SCHEMA atk TO {reader};
GRANT USAGE, CREATE ON SCHEMA atk TO {owner};
SET ROLE {atk};
-- What the attacker wants the server to run: it takes a transaction ID and sends a NOTIFY
-- naming the role that ran it, which a read-only transaction allows. IMMUTABLE, so the
-- planner folds it (EXPLAIN alone runs it).
CREATE FUNCTION atk.evil() RETURNS text IMMUTABLE LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_catalog.pg_notify('atk', current_user::text);
    RETURN pg_catalog.pg_current_xact_id()::text;
END $$;
SET ROLE {owner};
ALTER DEFAULT PRIVILEGES IN SCHEMA atk GRANT SELECT ON TABLES TO {reader};
CREATE TABLE atk.t (id int PRIMARY KEY, v text);
INSERT INTO atk.t VALUES (1, 'a'), (2, 'b');
CREATE VIEW atk.v AS SELECT id, v FROM atk.t;
CREATE TABLE atk.r (id int PRIMARY KEY, v text);
INSERT INTO atk.r VALUES (1, 'a');
CREATE TABLE atk.p (id int PRIMARY KEY, v text);
INSERT INTO atk.p VALUES (1, 'a');
CREATE TABLE atk.pt (id int, v text) PARTITION BY RANGE (id);
CREATE TABLE atk.pt1 PARTITION OF atk.pt FOR VALUES FROM (0) TO (100);
INSERT INTO atk.pt VALUES (1, 'a');
RESET ROLE;
-- Least privilege: the reader sees a table of a schema it may not use through a view only.
CREATE SCHEMA hidden;
CREATE TABLE hidden.h (id int PRIMARY KEY);
INSERT INTO hidden.h VALUES (1), (2);
CREATE VIEW public.shown AS SELECT id FROM hidden.h;
GRANT SELECT ON public.shown TO {reader};
-- A trusted role's function that lies about what it does (STABLE, yet it sends a NOTIFY):
-- what gets past the guard, for the backstop to catch.
CREATE FUNCTION public.notify_stable(text, text) RETURNS void STABLE LANGUAGE internal
    AS 'pg_notify';
"""

REPLACE_VIEW = "CREATE OR REPLACE VIEW atk.v AS SELECT id, v || atk.evil() AS v FROM atk.t"
RENAME_AND_REPLACE = (
    "ALTER TABLE atk.r RENAME TO r_old; "
    "CREATE VIEW atk.r AS SELECT id, v || atk.evil() AS v FROM atk.r_old"
)
ADD_POLICY = (
    "CREATE POLICY evil ON atk.p USING (atk.evil() IS NOT NULL); "
    "ALTER TABLE atk.p ENABLE ROW LEVEL SECURITY"
)
# A partition swapped for one whose index predicate the planner folds (it runs evil()).
SWAP_PARTITION = (
    "ALTER TABLE atk.pt DETACH PARTITION atk.pt1; "
    "CREATE TABLE atk.pt2 (id int, v text); "
    "CREATE INDEX ON atk.pt2 (id) WHERE atk.evil() IS NOT NULL; "
    "ALTER TABLE atk.pt ATTACH PARTITION atk.pt2 FOR VALUES FROM (0) TO (100)"
)
NEXT_XID = "SELECT pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())::text::bigint"


def as_role(dsn: str, role: str) -> str:
    return f"postgresql://{role}@{dsn.split('@', 1)[1]}"


@dataclass
class Bed:
    admin: str  # the database, as the test bed's superuser
    changer: str  # the application owner's session, which changes what a statement reads
    reader: str  # the server's role: SELECT on the attacker's schema, nothing more
    database: str
    reader_role: str
    owner_role: str  # owns the raced relations; trusted by the servers here
    untrusted: str  # the role that owns atk.evil() and schema atk, trusted by no one

    async def next_xid(self) -> int:
        value: int = (await fetch(self.admin, NEXT_XID))[0][0]
        return value

    async def burnt_xids(self, since: int) -> list[int]:
        """Transaction IDs from `since` on that were taken and rolled back: only the server
        rolls back here (the attacker and the test's own sessions commit or take none)."""
        until = await self.next_xid()
        rows = await fetch(
            self.admin,
            "SELECT x FROM generate_series($1::bigint, $2::bigint - 1) x "
            "WHERE pg_catalog.pg_xact_status(x::text::xid8) <> 'committed'",
            since,
            until,
        )
        return [r["x"] for r in rows]


@pytest_asyncio.fixture(loop_scope="session")
async def bed(pg: PgServer) -> AsyncIterator[Bed]:
    db = await pg.create_database("races")
    tag = secrets.token_hex(4)
    atk, reader, owner = f"race_atk_{tag}", f"race_reader_{tag}", f"race_owner_{tag}"
    await execute(db.dsn, SETUP.format(atk=atk, reader=reader, owner=owner))
    try:
        yield Bed(
            db.dsn,
            as_role(db.dsn, owner),
            as_role(db.dsn, reader),
            db.name,
            reader,
            owner,
            as_role(db.dsn, atk),
        )
    finally:
        await pg.drop_database(db.name)
        await execute(pg.admin_dsn, f"DROP ROLE {atk}; DROP ROLE {reader}; DROP ROLE {owner}")


@asynccontextmanager
async def server(dsn: str, trusted: str, **database: Any) -> AsyncIterator[Client]:
    settings = Settings.load(database={"dsn": dsn, **database}, server={"trusted_roles": [trusted]})
    async with Client(build_server(settings)) as client:
        yield client


async def wait_for_lock_wait(admin: str, database: str) -> None:
    """Until the server's backend waits on a heavyweight lock: the race window is entered."""

    async def waiting() -> bool:
        rows = await fetch(
            admin,
            "SELECT 1 FROM pg_catalog.pg_stat_activity WHERE datname = $1 "
            "AND application_name = 'pg-mcp-server' AND wait_event_type = 'Lock'",
            database,
        )
        return bool(rows)

    await eventually(
        waiting, what="the server's call waiting on the attacker's lock", interval=0.01
    )


async def held_while(
    bed: Bed, change: str, attempt: Callable[[], Awaitable[Any]]
) -> tuple[Any, list[str]]:
    """Run `attempt` while the attacker holds `change` uncommitted; commit once the server's
    backend is seen waiting on it. What `attempt` returned, and the NOTIFYs heard."""
    listener = await asyncpg.connect(bed.admin)
    heard: list[str] = []
    await listener.add_listener("atk", lambda *args: heard.append(args[-1]))
    attacker = await asyncpg.connect(bed.changer)
    try:
        await attacker.execute("BEGIN")
        await attacker.execute(change)
        task = asyncio.ensure_future(attempt())
        try:
            await wait_for_lock_wait(bed.admin, bed.database)
        finally:
            await attacker.execute("COMMIT")
        outcome = await task
        await listener.execute("SELECT 1")  # a round trip: a NOTIFY sent would be here now
        return outcome, heard
    finally:
        await attacker.close()
        await listener.close()


async def race(bed: Bed, change: str, attempt: Callable[[], Awaitable[Any]]) -> Any:
    """`held_while`, after checking that the attacker's function never ran as the server's
    role: no NOTIFY of the server's role, no transaction ID taken. What `attempt` returned."""
    since = await bed.next_xid()
    outcome, heard = await held_while(bed, change, attempt)
    # (the attacker's own DDL may run it: CREATE INDEX folds its predicate)
    assert bed.reader_role not in heard, "the attacker's function ran: its NOTIFY arrived"
    assert await bed.burnt_xids(since) == [], "the attacker's function took an XID"
    return outcome


def assert_refused(body: dict[str, Any]) -> None:
    error = body["error"]
    assert error["code"] == "WRITE_OPERATION_DENIED", error
    assert error["context"]["rule"] == "untrusted_owner", error
    assert "atk.evil()" in error["context"]["culprit"], error


CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "execute_query": ("execute_query", {"sql": "SELECT id, v FROM atk.v ORDER BY id"}),
    "execute_query_timeout": (
        "execute_query",
        {"sql": "SELECT id, v FROM atk.v ORDER BY id", "timeout_ms": 20_000},
    ),
    "explain": ("explain_query", {"sql": "SELECT id, v FROM atk.v"}),
    "explain_analyze": ("explain_query", {"sql": "SELECT id, v FROM atk.v", "analyze": True}),
    "get_sample_rows": ("get_sample_rows", {"schema_name": "atk", "table_name": "v"}),
}


@pytest.mark.parametrize("warm", [True, False], ids=["plan-known", "first-call"])
@pytest.mark.parametrize("name", sorted(CALLS))
async def test_a_view_replaced_while_the_call_waits_is_refused(
    bed: Bed, name: str, warm: bool
) -> None:
    tool, arguments = CALLS[name]
    async with server(bed.reader, bed.owner_role) as client:
        if warm:  # the plan is known: its locks go out with BEGIN (see engine.Prelude)
            await call(client, tool, **arguments)
        body = await race(bed, REPLACE_VIEW, lambda: call_error(client, tool, **arguments))
        assert_refused(body)


async def test_the_sample_resource_is_refused_too(bed: Bed) -> None:
    uri = "pg://schemas/atk/tables/v/sample"
    async with server(bed.reader, bed.owner_role) as client:
        await client.read_resource(uri, cache_mode="bypass")

        async def read() -> dict[str, Any]:
            with pytest.raises(MCPError) as caught:
                await client.read_resource(uri, cache_mode="bypass")
            data = caught.value.error.data
            assert isinstance(data, dict)
            return data

        assert_refused(await race(bed, REPLACE_VIEW, read))


async def test_a_table_renamed_and_replaced_by_a_view_is_refused(bed: Bed) -> None:
    sql = "SELECT id, v FROM atk.r"
    async with server(bed.reader, bed.owner_role) as client:
        assert records(await call(client, "execute_query", sql=sql)) == [{"id": 1, "v": "a"}]
        body = await race(
            bed, RENAME_AND_REPLACE, lambda: call_error(client, "execute_query", sql=sql)
        )
        assert_refused(body)


async def test_a_partition_swapped_while_the_call_waits_is_refused(bed: Bed) -> None:
    """The partitioned table is locked with LOCK TABLE (the reader may SELECT it), which
    locks its partitions too."""
    sql = "SELECT id, v FROM atk.pt WHERE id = 1"
    async with server(bed.reader, bed.owner_role) as client:
        assert records(await call(client, "execute_query", sql=sql)) == [{"id": 1, "v": "a"}]
        body = await race(bed, SWAP_PARTITION, lambda: call_error(client, "execute_query", sql=sql))
        assert_refused(body)


@pytest.mark.parametrize("tool", ["execute_query", "get_sample_rows"])
async def test_a_policy_added_while_the_call_waits_is_refused(bed: Bed, tool: str) -> None:
    arguments: dict[str, Any] = (
        {"sql": "SELECT id, v FROM atk.p"}
        if tool == "execute_query"
        else {"schema_name": "atk", "table_name": "p"}
    )
    async with server(bed.reader, bed.owner_role) as client:
        await call(client, tool, **arguments)
        body = await race(bed, ADD_POLICY, lambda: call_error(client, tool, **arguments))
        assert_refused(body)


async def test_transaction_pool_mode_is_held_to_the_same_verdict(bed: Bed) -> None:
    tool, arguments = CALLS["execute_query"]
    async with server(bed.reader, bed.owner_role, pool_mode="transaction") as client:
        await call(client, tool, **arguments)
        body = await race(bed, REPLACE_VIEW, lambda: call_error(client, tool, **arguments))
        assert_refused(body)


async def test_behind_pgbouncer_the_verdict_holds_too(bed: Bed, pg: PgServer) -> None:
    tool, arguments = CALLS["execute_query"]
    # PgBouncer's user is the test bed's superuser (trusted, but not the attacker).
    async with (
        pgbouncer(pg.admin_dsn) as running,
        server(running.dsn(bed.database), bed.owner_role) as client,
    ):
        await call(client, tool, **arguments)
        body = await race(bed, REPLACE_VIEW, lambda: call_error(client, tool, **arguments))
        assert_refused(body)


@pytest.mark.parametrize("warm", [True, False], ids=["plan-known", "first-call"])
async def test_a_lock_held_longer_than_the_call_timeout_is_a_structured_error(
    bed: Bed, warm: bool
) -> None:
    sql = "SELECT id, v FROM atk.v ORDER BY id"
    attacker = await asyncpg.connect(bed.changer)
    try:
        async with server(bed.reader, bed.owner_role) as client:
            await call(client, "execute_query", sql=sql if warm else "SELECT 1")
            await attacker.execute("BEGIN; LOCK TABLE atk.t IN ACCESS EXCLUSIVE MODE")
            body = await call_error(client, "execute_query", sql=sql, timeout_ms=300)
            error = body["error"]
            assert error["code"] == "QUERY_TIMEOUT", error
            assert error["context"]["waiting_for"] == "lock", error
            # (the call locks atk.v and atk.t, which the view reads: pg_locks tells which)
            assert error["context"]["relations"] == ['"atk"."t"'], error
            assert error["message"].startswith('Waited 300 ms for a lock on "atk"."t": another')
            # The attacker's session was left alone, and the server answers once it is done.
            assert await attacker.fetchval("SELECT count(*) FROM atk.t") == 2
            await attacker.execute("COMMIT")
            assert len(records(await call(client, "execute_query", sql=sql))) == 2
    finally:
        await attacker.close()


async def test_a_schema_renamed_and_made_again_is_seen(bed: Bed) -> None:
    """Not a race: the guard resolves schema names and locks relations by qualified name,
    so a schema renamed and another made with its name must be noticed at the next call."""
    sql = "SELECT id, v FROM atk.v ORDER BY id"
    async with server(bed.reader, bed.owner_role) as client:
        await call(client, "execute_query", sql=sql)
        await execute(
            bed.admin,
            "ALTER SCHEMA atk RENAME TO atk_old; CREATE SCHEMA atk; "
            "GRANT USAGE ON SCHEMA atk TO PUBLIC; "
            "CREATE FUNCTION atk.evil() RETURNS text IMMUTABLE LANGUAGE sql AS 'SELECT ''x'''; "
            "CREATE VIEW atk.v AS SELECT 1 AS id, atk_old.evil() AS v; "
            "GRANT SELECT ON atk.v TO PUBLIC",
        )
        body = await call_error(client, "execute_query", sql=sql)
        error = body["error"]
        assert error["code"] == "WRITE_OPERATION_DENIED", error
        assert "atk_old.evil()" in error["context"]["culprit"], error


async def test_a_view_over_a_schema_the_role_may_not_use_still_works_and_is_locked(
    bed: Bed,
) -> None:
    """The guard locks by name only relations in schemas the role may use; what the view
    reads elsewhere is locked by the view's own lock (the rewriter locks it), and a wait for
    it names it."""
    sql = "SELECT id FROM public.shown ORDER BY id"
    admin = await asyncpg.connect(bed.admin)
    try:
        async with server(bed.reader, bed.owner_role) as client:
            for _ in range(2):  # the first call, then with its locks sent with BEGIN
                assert records(await call(client, "execute_query", sql=sql)) == [
                    {"id": 1},
                    {"id": 2},
                ]
            await admin.execute("BEGIN; LOCK TABLE hidden.h IN ACCESS EXCLUSIVE MODE")
            body = await call_error(client, "execute_query", sql=sql, timeout_ms=300)
            assert body["error"]["code"] == "QUERY_TIMEOUT", body
            assert body["error"]["context"]["relations"] == ['"hidden"."h"'], body
            await admin.execute("COMMIT")
    finally:
        await admin.close()


async def test_a_notify_that_got_past_the_guard_is_never_delivered(bed: Bed) -> None:
    """Issue 19, finding 8: the caller's statement runs in an explicit transaction that is
    rolled back, never committed, and PostgreSQL delivers notifications only at commit."""
    listener = await asyncpg.connect(bed.admin)
    heard: list[str] = []
    await listener.add_listener("atk", lambda *args: heard.append(args[-1]))
    try:
        async with server(bed.reader, bed.owner_role) as client:
            sql = "SELECT public.notify_stable('atk', 'delivered')::text AS v"
            assert records(await call(client, "execute_query", sql=sql)) == [{"v": ""}]
        await listener.execute("SELECT 1")  # a round trip: a NOTIFY sent would be here now
        assert heard == []
    finally:
        await listener.close()


async def test_a_table_held_exclusively_does_not_hang_the_listing_of_its_schema(
    bed: Bed,
) -> None:
    """attack2 F9: listing a schema measured a never-analyzed table exactly, which opens it, so
    a role holding its own table ACCESS EXCLUSIVE hung every listing of the schema until the
    statement timeout. A held relation keeps its page-count size instead."""
    attacker = await asyncpg.connect(bed.changer)
    try:
        async with server(bed.reader, bed.owner_role, statement_timeout=3000) as client:
            await attacker.execute("BEGIN; LOCK TABLE atk.t IN ACCESS EXCLUSIVE MODE")
            held = await fetch(
                bed.admin,
                "SELECT count(*) AS n FROM pg_catalog.pg_locks WHERE granted "
                "AND mode = 'AccessExclusiveLock' AND relation = 'atk.t'::regclass",
            )
            assert held[0]["n"] == 1  # the hold is real
            listed = await call(client, "list_tables", schema_name="atk")
            assert "t" in {t["name"] for t in listed["tables"]}
            read = await client.read_resource("pg://schemas/atk/tables", cache_mode="bypass")
            assert '"name":"t"' in read.contents[0].text  # type: ignore[union-attr]
            await attacker.execute("COMMIT")
    finally:
        await attacker.close()


async def test_a_relation_the_path_never_picks_is_not_judged(bed: Bed) -> None:
    """attack2 F15: PostgreSQL resolves a relation name in the first schema of the path that
    has one; a role's relation of the same name in a later schema is never read, so it must
    not get the intended one refused (nor what resolves to it accepted)."""
    attacker = await asyncpg.connect(bed.untrusted)
    try:
        await attacker.execute(
            "CREATE TABLE atk.shown (id int); GRANT SELECT ON atk.shown TO PUBLIC"
        )
    finally:
        await attacker.close()
    await execute(bed.admin, f"ALTER ROLE {bed.reader_role} SET search_path = public, atk")
    async with server(bed.reader, bed.owner_role) as client:
        rows = records(await call(client, "execute_query", sql="SELECT id FROM shown ORDER BY id"))
        assert rows == [{"id": 1}, {"id": 2}]  # public.shown, over hidden.h
        body = await call_error(client, "execute_query", sql="SELECT id FROM atk.shown")
        assert body["error"]["context"]["rule"] == "untrusted_owner", body


SMUGGLED = "SELECT 'a\\', ' || (pg_catalog.pg_current_xact_id())::text --'"


async def test_a_role_without_standard_conforming_strings_gets_them_on(bed: Bed) -> None:
    """attack3 F19: the guard parses as PostgreSQL does with standard_conforming_strings on.
    With the role's setting off, PostgreSQL ended `'a\\'` elsewhere and ran what the guard had
    judged a string constant (EXPLAIN ANALYZE took an XID). The server asks for it on at
    start-up, which wins over the role's setting: the constant stays a constant."""
    await execute(bed.admin, f"ALTER ROLE {bed.reader_role} SET standard_conforming_strings = off")
    plain = await fetch(bed.reader, "SHOW standard_conforming_strings")
    assert plain[0][0] == "off"  # what any other session of the role gets
    async with server(bed.reader, bed.owner_role) as client:
        since = await bed.next_xid()
        out = await call(client, "explain_query", sql=SMUGGLED, analyze=True)
        assert out["plan"]
        assert await bed.burnt_xids(since) == []


async def test_standard_conforming_strings_off_in_the_dsn_is_overridden_too(bed: Bed) -> None:
    """Off in the DSN's own options as well: the server's start-up setting still wins (the
    guard would refuse a session where it did not: rule standard_conforming_strings)."""
    dsn = (
        bed.reader
        + ("&" if "?" in bed.reader else "?")
        + ("options=-c%20standard_conforming_strings%3Doff")
    )
    async with server(dsn, bed.owner_role) as client:
        since = await bed.next_xid()
        out = await call(client, "explain_query", sql=SMUGGLED, analyze=True)
        assert out["plan"]
        assert await bed.burnt_xids(since) == []
        shown = await call(
            client,
            "execute_query",
            sql="SELECT current_setting('standard_conforming_strings') AS s",
        )
        assert records(shown) == [{"s": "on"}]


async def test_a_trusted_role_another_role_may_act_as_is_not_trusted(bed: Bed) -> None:
    """attack3 F16: trust went by role name, so a role that is a member of a trusted one (it
    may SET ROLE to it) could make that role's objects run its code. A trusted role with such a
    member is not trusted, from the next call on (memberships are in the per-call digest)."""
    sql = "SELECT id, v FROM atk.t ORDER BY id"
    async with server(bed.reader, bed.owner_role) as client:
        assert len(records(await call(client, "execute_query", sql=sql))) == 2
        untrusted = bed.untrusted.split("://", 1)[1].split("@", 1)[0]
        await execute(bed.admin, f"GRANT {bed.owner_role} TO {untrusted}")
        body = await call_error(client, "execute_query", sql=sql)
        assert body["error"]["context"]["rule"] == "untrusted_owner", body
        assert bed.owner_role in body["error"]["message"], body
        await execute(bed.admin, f"REVOKE {bed.owner_role} FROM {untrusted}")
        assert len(records(await call(client, "execute_query", sql=sql))) == 2

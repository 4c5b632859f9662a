"""Statements run without the schemas anyone may create in (security review F4, F6, F3).

A role that is not trusted has CREATE on `public` (legacy rights) and plants operators there:
`public.=(varchar, varchar)`, which beats the built-in `=(text, text)` for `code = 'x'` on a
varchar column, and `public.=` on a type of its own, which asyncpg's own type lookup could
reach. Names resolve again when PostgreSQL parses the statement, after the guard's check, so
the guard leaves such "open" schemas off the path the statement runs on (SET LOCAL in its
transaction) unless one of its names has a trusted candidate there: an object planted there,
before the check or between it and the parse, is then not found at all, neither refused (the
denial of service of F6) nor run (the race of F4).

The planted function takes a transaction ID and raises 'PWNED': had it run, the call would
fail with that message and a transaction ID would have been consumed and rolled back (only the
server rolls back here; the attacker's DDL commits).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from eventually import eventually
from guardbed import burnt_xids, next_xid_when_idle
from mcp import Client
from mcpclient import call, call_error, execute, records
from pgbed import PgServer
from wire import pgbouncer

from pg_mcp_server.config import Settings
from pg_mcp_server.database.guard.gate import SqlGuard
from pg_mcp_server.database.pool.engine import Database
from pg_mcp_server.server import build_server

SETUP = """
CREATE ROLE {atk} LOGIN;
CREATE ROLE {reader} LOGIN;
GRANT CREATE, USAGE ON SCHEMA public TO {atk};  -- legacy public CREATE rights
CREATE SCHEMA atk AUTHORIZATION {atk};
CREATE SCHEMA app;
GRANT USAGE ON SCHEMA app TO {reader};
CREATE TABLE app.items (id int PRIMARY KEY, code varchar(10));
INSERT INTO app.items VALUES (1, 'x'), (2, 'y');
GRANT SELECT ON app.items TO {reader};
CREATE TYPE public.mood AS ENUM ('fine', 'sad');
CREATE TABLE public.items (id int PRIMARY KEY, code varchar(10));
INSERT INTO public.items VALUES (10, 'x'), (20, 'y');
GRANT SELECT ON public.items TO {reader};
-- A trusted function in public (the test bed's superuser owns it).
CREATE FUNCTION public.trusted_double(int) RETURNS int IMMUTABLE LANGUAGE sql AS 'SELECT $1 * 2';
-- ... and one whose body PostgreSQL resolved when it was made (BEGIN ATOMIC).
CREATE FUNCTION public.trusted_triple(int) RETURNS int IMMUTABLE LANGUAGE sql
    BEGIN ATOMIC SELECT $1 * 3; END;
-- A type the attacker can plant an operator on (a trusted role's, so that reading it is
-- allowed: the driver then looks it up, on the statement's path).
CREATE TYPE atk.mine AS (v int);
SET ROLE {atk};
CREATE FUNCTION atk.evil(varchar, varchar) RETURNS boolean IMMUTABLE LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'PWNED as % (xid %)', current_user, pg_catalog.pg_current_xact_id();
END $$;
GRANT USAGE ON SCHEMA atk TO PUBLIC;
CREATE FUNCTION atk.mine_eq(atk.mine, atk.mine) RETURNS boolean IMMUTABLE LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'PWNED as % (xid %)', current_user, pg_catalog.pg_current_xact_id();
END $$;
RESET ROLE;
"""
PLANT_EQ = "CREATE OPERATOR public.= (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = atk.evil)"
DROP_EQ = "DROP OPERATOR IF EXISTS public.= (varchar, varchar)"
PLANT_OWN = (
    "CREATE OPERATOR public.= (LEFTARG = atk.mine, RIGHTARG = atk.mine, FUNCTION = atk.mine_eq)"
)
DROP_OWN = "DROP OPERATOR IF EXISTS public.= (atk.mine, atk.mine)"
NEXT_XID = "SELECT pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())::text::bigint"

QUERY = "SELECT id, code, current_setting('search_path') AS path FROM app.items WHERE code = 'x'"
FOLDED = "SELECT 1 AS one WHERE 'x'::varchar = 'y'"  # the planner folds the comparison


def as_role(dsn: str, role: str) -> str:
    return f"postgresql://{role}@{dsn.split('@', 1)[1]}"


@dataclass
class Bed:
    admin: str
    attacker: str
    reader: str
    database: str

    async def burnt_xids(self, since: int) -> list[int]:
        return await burnt_xids(self.admin, since)

    async def next_xid(self) -> int:
        return await next_xid_when_idle(self.admin)


@pytest_asyncio.fixture(loop_scope="session")
async def bed(pg: PgServer) -> AsyncIterator[Bed]:
    db = await pg.create_database("open_schemas")
    tag = secrets.token_hex(4)
    atk, reader = f"open_atk_{tag}", f"open_reader_{tag}"
    await execute(db.dsn, SETUP.format(atk=atk, reader=reader))
    try:
        yield Bed(db.dsn, as_role(db.dsn, atk), as_role(db.dsn, reader), db.name)
    finally:
        await pg.drop_database(db.name)
        await execute(pg.admin_dsn, f"DROP ROLE {atk}; DROP ROLE {reader}")


@asynccontextmanager
async def server(dsn: str, *, open_code: bool = False, **database: Any) -> AsyncIterator[Client]:
    """`open_code`: MCP_ALLOW_OPEN_SCHEMA_CODE (the risk of a trusted name in an open schema
    accepted)."""
    settings = Settings.load(
        database={"dsn": dsn, **database}, server={"allow_open_schema_code": open_code}
    )
    async with Client(build_server(settings)) as client:
        yield client


@asynccontextmanager
async def planted(bed: Bed, create: str, drop: str) -> AsyncIterator[None]:
    await execute(bed.attacker, create)
    try:
        yield
    finally:
        await execute(bed.attacker, drop)


async def assert_live(bed: Bed, sql: str) -> None:
    """The plant runs for `sql` on the session's own path: the test would catch it."""
    conn = await asyncpg.connect(bed.reader)
    try:
        with pytest.raises(asyncpg.RaiseError, match="PWNED"):
            async with conn.transaction(readonly=True):
                await conn.fetch(sql)
    finally:
        await conn.close()


def assert_served(out: dict[str, Any]) -> None:
    rows = records(out)
    assert [(r["id"], r["code"]) for r in rows] == [(1, "x")], rows
    assert "public" not in rows[0]["path"], rows  # the statement's own path


MODES = ["session", "transaction"]


@pytest.mark.parametrize("pool_mode", MODES)
async def test_a_planted_operator_on_the_attackers_own_type_refuses_nothing(
    bed: Bed, pool_mode: str
) -> None:
    """F6: asyncpg's type lookup could reach `public.=(atk.mine, atk.mine)` were public on
    the path, so the guard refused every statement. Now public is off the path: ordinary
    statements are served, and the plant never runs."""
    async with planted(bed, PLANT_OWN, DROP_OWN), server(bed.reader, pool_mode=pool_mode) as c:
        since = await bed.next_xid()
        for _ in range(2):  # the first call, then with its plan known (SET with BEGIN)
            assert records(await call(c, "execute_query", sql="SELECT 1 AS one")) == [{"one": 1}]
            assert_served(await call(c, "execute_query", sql=QUERY))
            # A result of the attacker's type: the driver looks it up, on the same path.
            out = await call(c, "execute_query", sql="SELECT ROW(1)::atk.mine AS m")
            assert records(out) == [{"m": {"v": 1}}]
        assert await bed.burnt_xids(since) == []


TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "execute_query": ("execute_query", {"sql": QUERY}),
    "explain": ("explain_query", {"sql": FOLDED}),
    "explain_analyze": ("explain_query", {"sql": QUERY, "analyze": True}),
    "get_sample_rows": (
        "get_sample_rows",
        {"schema_name": "app", "table_name": "items", "where_clause": "code = 'x'"},
    ),
}


@pytest.mark.parametrize("pool_mode", MODES)
@pytest.mark.parametrize("name", sorted(TOOLS))
async def test_a_planted_operator_present_at_the_check_is_neither_refused_nor_run(
    bed: Bed, name: str, pool_mode: str
) -> None:
    """F4, deterministically: the plant is there when the guard checks and when PostgreSQL
    parses. Before, the guard refused the call (the plant was a candidate); on a race, it
    ran. Now public is off the statement's path: served, the plant never runs."""
    tool, arguments = TOOLS[name]
    async with planted(bed, PLANT_EQ, DROP_EQ):
        await assert_live(bed, QUERY)
        async with server(bed.reader, pool_mode=pool_mode) as client:
            since = await bed.next_xid()
            for _ in range(2):  # the first call, then with its plan known (SET with BEGIN)
                out = await call(client, tool, **arguments)
                if name == "execute_query":
                    assert_served(out)
                elif name == "get_sample_rows":
                    assert [r["id"] for r in records(out)] == [1]
            assert await bed.burnt_xids(since) == []


async def test_the_sample_resource_runs_off_the_open_schema_too(bed: Bed) -> None:
    uri = "pg://schemas/app/tables/items/sample"
    async with planted(bed, PLANT_OWN, DROP_OWN), server(bed.reader) as client:
        since = await bed.next_xid()
        for _ in range(2):
            result = await client.read_resource(uri, cache_mode="bypass")
            assert '"x"' in result.contents[0].text  # type: ignore[union-attr]
        assert await bed.burnt_xids(since) == []


async def test_behind_pgbouncer_the_plant_is_off_the_path_too(bed: Bed, pg: PgServer) -> None:
    async with (
        planted(bed, PLANT_EQ, DROP_EQ),
        pgbouncer(pg.admin_dsn) as running,
        server(running.dsn(bed.database)) as client,
    ):
        since = await bed.next_xid()
        for _ in range(3):
            assert_served(await call(client, "execute_query", sql=QUERY))
        assert await bed.burnt_xids(since) == []


async def _flip(bed: Bed, stop: asyncio.Event, flips: list[int]) -> None:
    """Create and drop the plant as fast as the attacker can, until told to stop (at most
    100,000 times: the loop ends by itself)."""
    conn = await asyncpg.connect(bed.attacker)
    try:
        for _ in range(100_000):
            if stop.is_set():
                return
            await conn.execute(PLANT_EQ)
            await conn.execute(DROP_EQ)
            flips[0] += 1
    finally:
        await conn.execute(DROP_EQ)
        await conn.close()


@pytest.mark.parametrize("pool_mode", MODES)
async def test_a_plant_flipped_in_a_loop_never_runs(bed: Bed, pool_mode: str) -> None:
    """F4's race: a second session creates and drops the plant in a loop while the server
    serves calls (it ran in 15-50 % of them). Each call is served, none runs the plant."""
    calls = 40
    async with server(bed.reader, pool_mode=pool_mode) as client:
        assert_served(await call(client, "execute_query", sql=QUERY))
        since = await bed.next_xid()
        stop, flips = asyncio.Event(), [0]
        flipper = asyncio.create_task(_flip(bed, stop, flips))
        try:

            async def flipping() -> bool:
                return flips[0] > 0

            await eventually(flipping, what="the plant flipping")  # the race is on first
            started = flips[0]
            for _ in range(calls):
                assert_served(await call(client, "execute_query", sql=QUERY))
        finally:
            stop.set()
            await flipper
        assert flips[0] > started, "the plant did not flip while the calls ran"
        assert await bed.burnt_xids(since) == []


async def test_a_table_in_the_open_schema_is_named_with_its_schema(bed: Bed) -> None:
    """F4 for the common case, a table in public: the statement names it with its schema
    (in its parse tree) rather than keeping public on its path, so the plant is not found;
    the output is the same, column names included. A WITH name is never qualified."""
    sql = (
        "SELECT items.id, code, current_setting('search_path') AS path FROM items WHERE code = 'x'"
    )
    async with planted(bed, PLANT_EQ, DROP_EQ):
        await assert_live(bed, sql)
        async with server(bed.reader) as client:
            since = await bed.next_xid()
            for _ in range(2):
                out = await call(client, "execute_query", sql=sql)
                assert [c["name"] for c in out["columns"]] == ["id", "code", "path"]
                rows = records(out)
                assert [(r["id"], r["code"]) for r in rows] == [(10, "x")], rows
                assert "public" not in rows[0]["path"], rows
                plan = await call(client, "explain_query", sql=sql, analyze=True)
                assert "items" in plan["plan"]
            assert await bed.burnt_xids(since) == []
    async with server(bed.reader) as client:
        sql = "WITH items AS (SELECT 5 AS id) SELECT id FROM items"
        assert records(await call(client, "execute_query", sql=sql)) == [{"id": 5}]


async def test_a_type_in_the_open_schema_is_named_with_its_schema(bed: Bed) -> None:
    """The same for a type the statement names (a cast): qualified in its parse tree, public
    left off its path, the output column named as written."""
    sql = (
        "SELECT 'fine'::mood, current_setting('search_path') AS path "
        "FROM app.items WHERE code = 'x'"
    )
    async with planted(bed, PLANT_EQ, DROP_EQ):
        await assert_live(bed, sql)
        async with server(bed.reader) as client:
            since = await bed.next_xid()
            for _ in range(2):
                out = await call(client, "execute_query", sql=sql)
                assert [c["name"] for c in out["columns"]] == ["mood", "path"]
                rows = records(out)
                assert rows[0]["mood"] == "fine" and "public" not in rows[0]["path"], rows
            assert await bed.burnt_xids(since) == []


async def test_by_default_code_of_an_open_schema_is_refused(bed: Bed) -> None:
    """Issue 19's last race: a statement that uses a trusted function or operator of public
    (open here) by an unqualified name would keep public on its path, and one that names it
    with its schema has PostgreSQL look there, so an overload planted in public with a closer
    match of argument types between the check and the parse would run. By default such a
    statement is refused before anything runs, saying how to close the schema, whether or
    not a plant is there; what uses nothing of public runs, without it on its path."""
    refused = (
        "SELECT trusted_double(21) AS v",  # unqualified, a body resolved when it runs
        "SELECT trusted_triple(21) AS v",  # unqualified, BEGIN ATOMIC
        "SELECT public.trusted_double(21) AS v FROM app.items WHERE code = 'x'",
        "SELECT public.trusted_triple(21) AS v",
        # Nothing of that name there yet: one could be planted in the window.
        "SELECT 'a'::varchar OPERATOR(public.=) 'a'::varchar AS v",
    )
    async with server(bed.reader) as client:
        since = await bed.next_xid()
        for sql in refused:
            body = await call_error(client, "execute_query", sql=sql)
            assert body["error"]["context"]["rule"] == "open_schema_code", body
            assert "of schema public" in body["error"]["message"], body
            assert "REVOKE CREATE ON SCHEMA public FROM PUBLIC" in body["error"]["suggestion"]
        async with planted(bed, PLANT_EQ, DROP_EQ):
            for sql in refused:
                body = await call_error(client, "execute_query", sql=sql)
                assert body["error"]["code"] == "WRITE_OPERATION_DENIED", body
            out = records(await call(client, "execute_query", sql=QUERY))
            assert out[0]["code"] == "x" and "public" not in out[0]["path"], out
        assert await bed.burnt_xids(since) == []


async def test_code_of_an_open_schema_off_the_path_is_refused_too(bed: Bed) -> None:
    """A schema on no search path is looked in only when a statement names it; where a role
    that is not trusted may create objects (here: CREATE granted to PUBLIC), a function named
    there is refused by default as in public, and served once the schema is closed."""
    reader = bed.reader.split("://", 1)[1].split("@", 1)[0]
    await execute(
        bed.admin,
        "CREATE SCHEMA offpath; GRANT USAGE, CREATE ON SCHEMA offpath TO PUBLIC; "
        "CREATE FUNCTION offpath.twice(int) RETURNS int IMMUTABLE LANGUAGE sql "
        f"AS 'SELECT $1 * 2'; GRANT EXECUTE ON FUNCTION offpath.twice(int) TO {reader}",
    )
    sql = "SELECT offpath.twice(21) AS v"
    try:
        async with server(bed.reader) as client:
            body = await call_error(client, "execute_query", sql=sql)
            assert body["error"]["context"]["rule"] == "open_schema_code", body
            assert "of schema offpath" in body["error"]["message"], body
            assert "(PUBLIC)" in body["error"]["message"], body
        async with server(bed.reader, open_code=True) as client:
            assert records(await call(client, "execute_query", sql=sql)) == [{"v": 42}]
        await execute(bed.admin, "REVOKE CREATE ON SCHEMA offpath FROM PUBLIC")
        async with server(bed.reader) as client:
            assert records(await call(client, "execute_query", sql=sql)) == [{"v": 42}]
    finally:
        await execute(bed.admin, "DROP SCHEMA offpath CASCADE")


async def test_a_trusted_function_in_the_open_schema(bed: Bed) -> None:
    """With MCP_ALLOW_OPEN_SCHEMA_CODE (the risk accepted): a name with a trusted candidate
    in public keeps public on the statement's path. A
    function whose body PostgreSQL resolves when it runs is then refused (an operator planted
    in public between the check and the call would run inside it: F3); qualified, the call
    needs no path and runs; a BEGIN ATOMIC body was resolved when it was made and runs, and a
    plant in public is then judged as before: refused (the race stays open for such
    statements; docs/security.md)."""
    async with server(bed.reader, open_code=True) as client:
        body = await call_error(client, "execute_query", sql="SELECT trusted_double(21) AS v")
        assert body["error"]["context"]["rule"] == "open_schema_body", body
        assert "public.trusted_double" in body["error"]["context"]["culprit"], body
        qualified = "SELECT public.trusted_double(21) AS v FROM app.items WHERE code = 'x'"
        assert records(await call(client, "execute_query", sql=qualified)) == [{"v": 42}]
        atomic = "SELECT trusted_triple(21) AS v"
        assert records(await call(client, "execute_query", sql=atomic)) == [{"v": 63}]
        async with planted(bed, PLANT_EQ, DROP_EQ):
            both = "SELECT trusted_triple(21) AS v FROM app.items WHERE code = 'x'"
            body = await call_error(client, "execute_query", sql=both)
            assert body["error"]["context"]["rule"] == "untrusted_owner", body
            culprit = body["error"]["context"]["culprit"]
            assert "atk.evil" in culprit or "public.=" in culprit, body
            assert records(await call(client, "execute_query", sql=qualified)) == [{"v": 42}]


async def test_a_schema_closed_again_is_searched_again(bed: Bed) -> None:
    """Whether a schema is open is read with the catalog, and its ACL is in the per-call
    digest: once CREATE is revoked, the statement runs on the session's path again."""
    sql = "SELECT current_setting('search_path') AS path"
    async with server(bed.reader) as client:
        assert "public" not in records(await call(client, "execute_query", sql=sql))[0]["path"]
        role = bed.attacker.split("://", 1)[1].split("@", 1)[0]
        await execute(bed.admin, f"REVOKE CREATE ON SCHEMA public FROM {role}")
        try:
            path = records(await call(client, "execute_query", sql=sql))[0]["path"]
            assert "public" in path, path
        finally:
            await execute(bed.admin, f"GRANT CREATE ON SCHEMA public TO {role}")
        assert "public" not in records(await call(client, "execute_query", sql=sql))[0]["path"]


async def test_schema_names_that_need_quoting_are_set_right(bed: Bed) -> None:
    """The path is set with each schema quoted: a name with a comma, a quote or capitals."""
    odd = 'we,ird "S"'
    quoted = '"' + odd.replace('"', '""') + '"'
    await execute(
        bed.admin,
        f"CREATE SCHEMA {quoted}; GRANT USAGE ON SCHEMA {quoted} TO PUBLIC; "
        f"CREATE TABLE {quoted}.t (n int); INSERT INTO {quoted}.t VALUES (7); "
        f"GRANT SELECT ON {quoted}.t TO PUBLIC; "
        f'ALTER DATABASE {bed.database} SET search_path = "$user", public, {quoted}',
    )
    try:
        async with server(bed.reader) as client:
            out = await call(client, "execute_query", sql="SELECT n FROM t")
            assert records(out) == [{"n": 7}]
            sql = "SELECT current_setting('search_path') AS path"
            path = records(await call(client, "execute_query", sql=sql))[0]["path"]
            assert "public" not in path and quoted in path, path
    finally:
        await execute(
            bed.admin,
            f"ALTER DATABASE {bed.database} RESET search_path; DROP SCHEMA {quoted} CASCADE",
        )


async def test_a_body_on_its_own_path_through_an_open_schema_off_the_sessions_path(
    bed: Bed,
) -> None:
    """attack3 F18: whether a schema is open was known only for schemas on the session's path,
    so a function whose own SET search_path names an open schema the session's path lacks ran
    its body there (an operator planted in public during a hold then ran inside it). Schemas a
    function's own path names are judged too: such a body is refused; one whose own path is
    safe is served."""
    reader = bed.reader.split("://", 1)[1].split("@", 1)[0]
    await execute(
        bed.admin,
        f"ALTER ROLE {reader} SET search_path = app; "
        "CREATE FUNCTION app.count_x_public() RETURNS bigint STABLE LANGUAGE sql "
        "SET search_path = public AS $$SELECT count(*) FROM items WHERE code = 'x'$$; "
        "CREATE FUNCTION app.count_x_app() RETURNS bigint STABLE LANGUAGE sql "
        "SET search_path = app AS $$SELECT count(*) FROM items WHERE code = 'x'$$; "
        f"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA app TO {reader}",
    )
    async with server(bed.reader) as client:
        body = await call_error(client, "execute_query", sql="SELECT app.count_x_public() AS n")
        assert body["error"]["context"]["rule"] == "open_schema_body", body
        assert "app.count_x_public" in body["error"]["context"]["culprit"], body
        out = await call(client, "execute_query", sql="SELECT app.count_x_app() AS n")
        assert records(out) == [{"n": 1}]


async def test_while_an_open_schema_stays_names_past_it_are_qualified_too(bed: Bed) -> None:
    """attack3 F17: a statement that uses a trusted object of public by an unqualified name
    keeps public on its path; a relation name that resolves in a later schema (app.items, on
    the path public, app) must then be written with its schema too, or a view of that name
    planted in public between the check and the parse would be read instead. What the guard
    hands on to run says so (and what it judged is what runs). With the risk accepted
    (MCP_ALLOW_OPEN_SCHEMA_CODE): refused otherwise."""
    reader = bed.reader.split("://", 1)[1].split("@", 1)[0]
    await execute(
        bed.admin,
        f"ALTER ROLE {reader} SET search_path = public, app; "
        "CREATE TABLE app.only_here (id int); INSERT INTO app.only_here VALUES (7); "
        f"GRANT SELECT ON app.only_here TO {reader}",
    )
    sql = "SELECT trusted_triple(id) AS v, current_setting('search_path') AS path FROM only_here"
    db = Database(Settings.load(database={"dsn": bed.reader, "pool_size": 1}).database)
    guard = SqlGuard(allow_open_schema_code=True)

    async def check(conn: asyncpg.Connection) -> str:
        return await guard.check(sql, conn)

    try:
        ran = await db.run(check, None, explicit=True)
    finally:
        await db.dispose()
    assert "app.only_here" in ran, ran
    async with server(bed.reader, open_code=True) as client:
        rows = records(await call(client, "execute_query", sql=sql))
    assert rows[0]["v"] == 21 and "public" in rows[0]["path"], rows  # public was kept

"""The guard judges the catalog as it is at the call (issue 12): objects created, replaced or
altered while the server runs are seen by the next call, a refusal lifts as soon as the object
is fixed, and MCP_TRUSTED_ROLES widens trust. One client session throughout: no restart, no
waiting."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio
from guardbed import planter_role
from mcp import Client
from mcpclient import call, call_error, connect, execute, fetch, records

SETUP = """
CREATE ROLE {role} NOLOGIN;
GRANT CREATE, USAGE ON SCHEMA public TO {role};
CREATE SCHEMA planter AUTHORIZATION {role};
CREATE FUNCTION public.fresh() RETURNS int STABLE LANGUAGE sql AS 'SELECT 1';
CREATE TABLE public.nums (n int);
INSERT INTO public.nums VALUES (1), (2);
SET ROLE {role};
CREATE FUNCTION planter.effect(int) RETURNS boolean IMMUTABLE LANGUAGE sql
    AS 'SELECT pg_catalog.pg_current_xact_id() IS NOT NULL AND $1 > 0';
CREATE FUNCTION planter.double(int) RETURNS int IMMUTABLE LANGUAGE sql AS 'SELECT $1 * 2';
CREATE VIEW planter.fresh_v AS SELECT public.fresh() AS x;
CREATE TYPE planter.boxed AS (v int);
CREATE TABLE planter.boxes (b planter.boxed);
INSERT INTO planter.boxes VALUES (ROW(1));
CREATE DOMAIN planter.d AS int;
CREATE TABLE planter.ds (v planter.d);
INSERT INTO planter.ds VALUES (1);
RESET ROLE;
-- The DBA's, built from the planter's parts (a relation or type the planter owned would be
-- refused outright: test_guard_objects.py `owned_*`).
ALTER VIEW planter.fresh_v OWNER TO CURRENT_USER;
ALTER TYPE planter.boxed OWNER TO CURRENT_USER;
ALTER TABLE planter.boxes OWNER TO CURRENT_USER;
ALTER DOMAIN planter.d OWNER TO CURRENT_USER;
ALTER TABLE planter.ds OWNER TO CURRENT_USER;
"""


@pytest_asyncio.fixture(loop_scope="session")
async def planted(scratch_dsn: str) -> AsyncIterator[tuple[str, str]]:
    role = planter_role()
    await execute(scratch_dsn, SETUP.format(role=role))
    try:
        yield scratch_dsn, role
    finally:
        await execute(scratch_dsn, f'DROP OWNED BY "{role}" CASCADE; DROP ROLE "{role}"')


async def refused(client: Client, sql: str, rule: str, culprit: str) -> None:
    body = await call_error(client, "execute_query", sql=sql)
    error = body["error"]
    assert error["code"] == "WRITE_OPERATION_DENIED", error
    assert error["context"]["rule"] == rule, error
    assert culprit in error["context"]["culprit"], error


async def test_changes_made_while_the_server_runs_are_judged_by_the_next_call(
    planted: tuple[str, str],
) -> None:
    dsn, role = planted

    async def as_planter(sql: str) -> None:
        await execute(dsn, f'SET ROLE "{role}"; {sql}')

    async with connect(dsn) as client:
        view = "SELECT x FROM planter.fresh_v"
        assert records(await call(client, "execute_query", sql=view)) == [{"x": 1}]

        # CREATE OR REPLACE of a function the guard has seen, then put right again.
        await execute(
            dsn,
            "CREATE OR REPLACE FUNCTION public.fresh() RETURNS int STABLE LANGUAGE sql "
            "AS 'SELECT (pg_catalog.pg_current_xact_id() IS NOT NULL)::int'",
        )
        await refused(client, view, "refused_function", "pg_current_xact_id")
        await execute(
            dsn,
            "CREATE OR REPLACE FUNCTION public.fresh() RETURNS int STABLE LANGUAGE sql "
            "AS 'SELECT 1'",
        )
        assert records(await call(client, "execute_query", sql=view)) == [{"x": 1}]

        # ALTER FUNCTION ... VOLATILE, and back.
        await execute(dsn, "ALTER FUNCTION public.fresh() VOLATILE")
        await refused(client, view, "volatile_function", "public.fresh")
        await execute(dsn, "ALTER FUNCTION public.fresh() STABLE")
        assert records(await call(client, "execute_query", sql=view)) == [{"x": 1}]

        # A new operator, for a statement PostgreSQL refused a moment ago.
        body = await call_error(client, "execute_query", sql="SELECT 1 <~> 2")
        assert body["error"]["code"] == "INVALID_SQL"  # no such operator yet
        await as_planter(
            "CREATE FUNCTION planter.effect_pair(int, int) RETURNS boolean IMMUTABLE "
            "LANGUAGE sql AS 'SELECT planter.effect($1) AND $1 = $2'; "
            "CREATE OPERATOR public.<~> (LEFTARG = int, RIGHTARG = int, "
            "FUNCTION = planter.effect_pair)"
        )
        # Named with public, where the planter may create objects: refused by default, as is
        # any function or operator looked up there (test_open_schemas.py); with that risk
        # accepted, as the planter's operator whatever its function (test_guard_objects.py).
        await refused(client, "SELECT 1 OPERATOR(public.<~>) 2", "open_schema_code", "statement")
        # Unqualified, it is not found: public, where the planter may create objects, is left
        # off the statement's path (no trusted candidate there).
        body = await call_error(client, "execute_query", sql="SELECT 1 <~> 2")
        assert body["error"]["code"] == "INVALID_SQL", body

        # A new implicit cast to a type the statement reads.
        boxes = "SELECT count(*) AS n FROM planter.boxes"
        assert records(await call(client, "execute_query", sql=boxes)) == [{"n": 1}]
        await as_planter(
            "CREATE FUNCTION planter.box(int) RETURNS planter.boxed IMMUTABLE LANGUAGE sql "
            "AS 'SELECT ROW($1)::planter.boxed WHERE planter.effect($1)'"
        )
        await execute(
            dsn, "CREATE CAST (int AS planter.boxed) WITH FUNCTION planter.box(int) AS IMPLICIT"
        )
        await refused(client, boxes, "untrusted_owner", "planter.box")

        # A CHECK added to a domain a table uses.
        domains = "SELECT v FROM planter.ds"
        assert records(await call(client, "execute_query", sql=domains)) == [{"v": 1}]
        await execute(
            dsn, "ALTER DOMAIN planter.d ADD CONSTRAINT c CHECK (planter.effect(VALUE)) NOT VALID"
        )
        await refused(client, domains, "untrusted_owner", "planter.effect")

        # A column moved to that domain without a table rewrite (pg_class stays as it was).
        nums = "SELECT n FROM public.nums ORDER BY n"
        assert records(await call(client, "execute_query", sql=nums)) == [{"n": 1}, {"n": 2}]
        await execute(dsn, "ALTER TABLE public.nums ALTER n TYPE planter.d")
        await refused(client, nums, "untrusted_owner", "planter.effect")


async def test_trusted_roles_setting_trusts_that_roles_functions(
    planted: tuple[str, str],
) -> None:
    dsn, role = planted
    sql = "SELECT planter.double(21) AS v"
    async with connect(dsn) as client:
        # The planter owns the function and its schema: named there, it is refused as code of
        # a schema a role that is not trusted may create in (before its owner is judged).
        await refused(client, sql, "open_schema_code", "statement")
    async with connect(dsn, allow_open_schema_code=True) as client:
        await refused(client, sql, "untrusted_owner", "planter.double")
    async with connect(dsn, trusted_roles=f"other, {role}") as client:
        assert records(await call(client, "execute_query", sql=sql)) == [{"v": 42}]
        # Trust covers the marking, not what the function reaches.
        await refused(client, "SELECT planter.effect(1)", "refused_function", "pg_current")


# Operators for the argument types an untyped constant gets in loosely written SQL: picked
# over the built-ins there (an exact match beats one needing a cast).
HIJACK = """
SET ROLE {role};
CREATE FUNCTION planter.reset_oid(oid, integer) RETURNS boolean IMMUTABLE LANGUAGE sql
    AS 'SELECT pg_catalog.pg_stat_reset()::text IS NULL';
CREATE FUNCTION planter.reset_cat(bigint, bigint) RETURNS text IMMUTABLE LANGUAGE sql
    AS 'SELECT pg_catalog.pg_stat_reset()::text';
CREATE FUNCTION planter.reset_name(name, name) RETURNS boolean IMMUTABLE LANGUAGE sql
    AS 'SELECT pg_catalog.pg_stat_reset()::text IS NULL';
CREATE OPERATOR public.>= (LEFTARG = oid, RIGHTARG = integer, FUNCTION = planter.reset_oid);
CREATE OPERATOR public.|| (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = planter.reset_cat);
CREATE OPERATOR public.!~ (LEFTARG = name, RIGHTARG = name, FUNCTION = planter.reset_name);
RESET ROLE;
"""
# ... and one that asyncpg's own type lookup (`typbasetype != 0`) would pick.
DRIVER_HIJACK = """
SET ROLE {role};
CREATE OPERATOR public.<> (LEFTARG = oid, RIGHTARG = integer, FUNCTION = planter.reset_oid);
RESET ROLE;
"""
STATS_RESET = "SELECT stats_reset::text FROM pg_stat_database WHERE datname = current_database()"
QUERIES = ("SELECT x FROM planter.fresh_v", "SELECT count(*) AS n FROM planter.ds")


async def test_planted_operators_take_over_neither_the_guards_queries_nor_the_drivers(
    planted: tuple[str, str],
) -> None:
    """The guard's own catalog queries give every operator its exact built-in types; the
    query asyncpg runs to learn an unfamiliar result type does not, but it runs on the
    statement's path, which leaves out public, where the planter may create objects: an
    operator planted there for it is never found (here `planter.ds` returns a domain's
    values), and refuses nothing (it refused every statement while public stayed on the
    path: security review F6)."""
    dsn, role = planted
    await execute(dsn, HIJACK.format(role=role))
    before = (await fetch(dsn, STATS_RESET))[0][0]
    async with connect(dsn) as client:  # a new server: it reads the catalog afresh
        for sql in QUERIES:
            await call(client, "execute_query", sql=sql)
            await call(client, "explain_query", sql=sql)
        await execute(dsn, "CREATE TABLE public.moved (n int)")  # some digests differ now
        await call(client, "execute_query", sql=QUERIES[1])
        await execute(dsn, DRIVER_HIJACK.format(role=role))
        for sql in QUERIES:
            await call(client, "execute_query", sql=sql)
    async with connect(dsn) as client:  # new sessions: the driver looks the domain up again
        for sql in QUERIES:
            await call(client, "execute_query", sql=sql)
    assert (await fetch(dsn, STATS_RESET))[0][0] == before


async def test_a_search_path_with_pg_catalog_not_first_is_refused(scratch_dsn: str) -> None:
    await execute(
        scratch_dsn,
        "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET search_path = public, pg_catalog', "
        "current_database()); END $$",
    )
    async with connect(scratch_dsn) as client:
        body = await call_error(client, "execute_query", sql="SELECT 1")
        assert body["error"]["context"]["rule"] == "search_path", body
        assert body["error"]["context"]["search_path"][:2] == ["public", "pg_catalog"]

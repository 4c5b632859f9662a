"""Security review attack6: a WITH name that the guard and PostgreSQL cut to different lengths.

refs.py leaves out of the relations it judges an unqualified FROM name that equals a WITH
name in scope (cte_references). It compares the names pglast gives, which its parser has
cut to 63 bytes of UTF-8 (NAMEDATALEN). PostgreSQL cuts identifiers in the database's
encoding: in a LATIN1 (or any single-byte) database an `é` is one byte, not two, so two
names of 64 UTF-8 bytes that differ only after the 63rd are one name to pglast (both cut
to the same 63 bytes) and two names to PostgreSQL (63 LATIN1 bytes each, nothing cut). The
guard then takes the second for the WITH query and judges nothing, while PostgreSQL reads
the relation of that name: here a view of a role that is not trusted, which runs that
role's function as the server's role.

execute_query and explain_query are not exposed: they run the statement written back from
pglast's tree, with the cut names. What runs the caller's text as given is: crosstab's SQL
argument (a string constant, judged by select_refs), and the workload advisor, which
prepares and plans each statement of queries=[...] as given (an IMMUTABLE function is run
by the planner to fold it). The root cause needs no WITH: any name longer than 63 UTF-8
bytes is looked up by the guard as pglast cut it, and by PostgreSQL as the database's
encoding cuts it (test_the_workload_advisor_judges_a_view_whose_name_pglast_cuts).

Fixed by refusing any identifier over 63 bytes (sql/tree.long_identifier), in statements and
in SQL a function runs from a string; these tests failed before that (they were strict xfails).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import asyncpg
import pytest
import pytest_asyncio
from mcpclient import call, call_error, connect, execute, fetch
from pgbed import PG15_BINDIR, PgServer, quote_ident, with_database
from pgcluster import LocalCluster

from pg_mcp_server.database.sql import refs_of, tree as sqltree

PREFIX = "recent_" + "x" * 54  # 61 bytes
WITH_NAME = PREFIX + "éa"  # 64 bytes in UTF-8, 63 in LATIN1
VIEW_NAME = PREFIX + "éb"  # the same 63 UTF-8 bytes first

SETUP = """
CREATE ROLE {atk} LOGIN;
CREATE ROLE {reader} LOGIN;
CREATE SCHEMA atk AUTHORIZATION {atk};
-- A schema first on the reader's path where the attacker owns a view but may not create
-- (one it may create in runs without it: a name found there would not resolve).
CREATE SCHEMA app;
GRANT USAGE ON SCHEMA app, atk TO PUBLIC;
ALTER ROLE {reader} SET search_path = app, public;
SET ROLE {atk};
-- Runs as whoever plans or reads the view (IMMUTABLE: the planner calls it to fold it),
-- and says who that is in the error it raises.
CREATE FUNCTION atk.pwn() RETURNS text LANGUAGE plpgsql IMMUTABLE
    AS $$ BEGIN RAISE EXCEPTION 'pwned as %', current_user; END $$;
RESET ROLE;
CREATE VIEW app."{view}" AS SELECT 1 AS n, atk.pwn() AS who;
ALTER VIEW app."{view}" OWNER TO {atk};
GRANT SELECT ON app."{view}" TO PUBLIC;
"""

STATEMENT = (
    f'WITH "{WITH_NAME}" AS (SELECT 1 AS n, \'cte\' AS who) SELECT n, who FROM "{VIEW_NAME}"'
)


@dataclass
class Bed:
    admin: str
    reader: str
    reader_role: str


def as_role(dsn: str, role: str) -> str:
    return f"postgresql://{role}@{dsn.split('@', 1)[1]}"


@asynccontextmanager
async def latin1_bed(admin_dsn: str, hypopg: bool) -> AsyncIterator[Bed]:
    """A LATIN1 database on the server of `admin_dsn`, with the attacker's view in it."""
    name = f"pgmcp_attack6_{secrets.token_hex(4)}"
    tag = secrets.token_hex(4)
    atk, reader = f"a6_atk_{tag}", f"a6_reader_{tag}"
    await execute(
        admin_dsn,
        f"CREATE DATABASE {quote_ident(name)} TEMPLATE template0 ENCODING 'LATIN1' "
        "LC_COLLATE 'C' LC_CTYPE 'C'",
    )
    dsn = with_database(admin_dsn, name)
    try:
        setup = SETUP.format(atk=atk, reader=reader, view=VIEW_NAME)
        await execute(dsn, ("CREATE EXTENSION hypopg;\n" if hypopg else "") + setup)
        yield Bed(dsn, as_role(dsn, reader), reader)
    finally:
        await execute(admin_dsn, f"DROP DATABASE IF EXISTS {quote_ident(name)} WITH (FORCE)")
        await execute(admin_dsn, f"DROP ROLE IF EXISTS {atk}; DROP ROLE IF EXISTS {reader}")


@pytest_asyncio.fixture(loop_scope="session")
async def latin1(pg: PgServer) -> AsyncIterator[Bed]:
    async with latin1_bed(pg.admin_dsn, hypopg=False) as bed:
        yield bed


@pytest_asyncio.fixture(loop_scope="session")
async def latin1_hypo() -> AsyncIterator[Bed]:
    """PostgreSQL 15 with HypoPG (.ci/run installs postgresql-15-hypopg), as
    test_workload_advice.py uses: the index advisor needs it."""
    cluster = await asyncio.to_thread(LocalCluster, PG15_BINDIR)
    try:
        async with latin1_bed(cluster.dsn(), hypopg=True) as bed:
            yield bed
    finally:
        await asyncio.to_thread(cluster.stop)


def test_pglast_takes_the_view_name_for_the_with_name() -> None:
    """The premise on the guard's side: both names cut to the same 63 bytes of UTF-8, the
    FROM item is taken for the WITH query and no relation is left to judge."""
    tree = sqltree.parse(STATEMENT)
    assert tree is not None
    refs = refs_of(tree)
    assert refs.relations == frozenset(), refs.relations
    assert refs.ctes == {WITH_NAME.encode()[:63].decode("utf-8", "ignore")}


async def test_postgresql_reads_the_view_in_a_latin1_database(latin1: Bed) -> None:
    """The premise on PostgreSQL's side: the names are distinct there, the FROM item is the
    attacker's view, and planning it runs the attacker's function as the reader."""
    with pytest.raises(asyncpg.RaiseError, match=f"pwned as {latin1.reader_role}$"):
        await fetch(latin1.reader, STATEMENT)


async def test_tools_refuse_a_name_longer_than_postgresql_keeps(latin1: Bed) -> None:
    """The fix: an identifier over 63 bytes is refused before anything else is judged, so the
    guard never reads a name otherwise than PostgreSQL does (execute_query and explain_query
    ran the statement written back from pglast's tree, which read the WITH query; the
    paths below ran the caller's text)."""
    async with connect(latin1.reader) as client:
        for tool, arguments in (
            ("execute_query", {"sql": STATEMENT}),
            ("explain_query", {"sql": STATEMENT, "analyze": True}),
        ):
            body = await call_error(client, tool, **arguments)
            assert body["error"]["context"]["rule"] == "long_identifier", body
            assert "pwned" not in str(body), body


async def test_the_workload_advisor_judges_a_view_named_like_a_with_query(
    latin1_hypo: Bed,
) -> None:
    async with connect(latin1_hypo.reader) as client:
        out = await call(client, "analyze_query_indexes", queries=[STATEMENT])
    (query,) = out["queries"]
    assert "pwned" not in str(query), f"bypass: the attacker's function ran: {query}"
    assert "refused" in query, query


# crosstab runs the SQL text it is given: the guard reads that text with select_refs, where
# the same cut names make the FROM item the WITH query.
CROSSTAB_SQL = (
    f"WITH \"{WITH_NAME}\" AS (SELECT 1 AS n, 'cte' AS who) "
    f"SELECT 'r'::text, 'c'::text, who FROM \"{VIEW_NAME}\""
)
CROSSTAB = "SELECT * FROM crosstab({}) AS ct(r text, c text)".format(
    "'" + CROSSTAB_SQL.replace("'", "''") + "'"
)


async def test_crosstab_sql_judges_a_view_named_like_a_with_query(latin1: Bed) -> None:
    available = await fetch(
        latin1.admin, "SELECT 1 FROM pg_available_extensions WHERE name = 'tablefunc'"
    )
    if not available:
        pytest.skip("tablefunc is not available on this server")
    await execute(latin1.admin, "CREATE EXTENSION IF NOT EXISTS tablefunc")
    async with connect(latin1.reader) as client:
        result = await client.call_tool("execute_query", {"sql": CROSSTAB})
    body = result.structured_content
    assert "pwned" not in str(body), f"bypass: the attacker's function ran: {body}"
    assert result.is_error and isinstance(body, dict), body
    # The SQL in the string names an identifier over 63 bytes: it cannot be read as
    # PostgreSQL would, so crosstab is refused as for SQL that is not a constant SELECT.
    assert body["error"]["code"] == "WRITE_OPERATION_DENIED", body


async def test_the_workload_advisor_judges_a_view_whose_name_pglast_cuts(
    latin1_hypo: Bed,
) -> None:
    sql = f'SELECT n, who FROM "{VIEW_NAME}"'
    async with connect(latin1_hypo.reader) as client:
        out = await call(client, "analyze_query_indexes", queries=[sql])
    (query,) = out["queries"]
    assert "pwned" not in str(query), f"bypass: the attacker's function ran: {query}"
    assert "refused" in query, query

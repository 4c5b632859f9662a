"""A relation named like a WITH query (security review attack4, F-A).

A role that is not trusted, with CREATE on `public` (legacy rights), makes tables named as
the WITH queries agents write (`recent`, `totals`); here it also owns such tables in a schema
first on the reader's path where it may not create (whose tables the guard judges, where it
runs a statement without `public` instead). PostgreSQL resolves an unqualified FROM item to
a WITH query of its own query level or of an enclosing one (the earlier queries of the same
WITH, or all of them when RECURSIVE): such a statement never reads the table, so the guard
neither judges nor locks it. A name of the same spelling outside that scope reads the table
and is refused as before: each statement below is first planned by PostgreSQL as the reader
(EXPLAIN), and whether its plan scans a table checks the scope rule it stands for.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import pytest
import pytest_asyncio
from mcp import Client
from mcpclient import call, call_error, connect, execute, fetch, records
from pgbed import PgServer

from pg_mcp_server.config import Settings
from pg_mcp_server.database.sql import refs_of, tree as sqltree
from pg_mcp_server.server import build_server

SETUP = """
CREATE ROLE {atk} LOGIN;
CREATE ROLE {reader} LOGIN;
GRANT CREATE, USAGE ON SCHEMA public TO {atk};
-- A schema first on the reader's path, where the attacker owns tables but may not create:
-- a name resolved there is judged (one in public, an open schema, runs without it).
CREATE SCHEMA app;
GRANT USAGE ON SCHEMA app TO PUBLIC;
CREATE TABLE app.recent (n int); INSERT INTO app.recent VALUES (666);
CREATE TABLE app.totals (n int); INSERT INTO app.totals VALUES (666);
ALTER TABLE app.recent OWNER TO {atk};
ALTER TABLE app.totals OWNER TO {atk};
ALTER ROLE {reader} SET search_path = app, public;
SET ROLE {atk};
GRANT SELECT ON app.recent, app.totals TO PUBLIC;
CREATE TABLE public.recent (n int); INSERT INTO public.recent VALUES (666);
CREATE TABLE public.ranked (n int); INSERT INTO public.ranked VALUES (666);
GRANT SELECT ON public.recent, public.ranked TO PUBLIC;
RESET ROLE;
"""

TABLE_ROW = 666

# WITH names in scope: PostgreSQL reads the WITH query, never the table.
IN_SCOPE = [
    "WITH recent AS (SELECT 1 AS n) SELECT n FROM recent",
    "WITH recent AS (SELECT 1 AS n) TABLE recent",
    "WITH recent AS (SELECT 1 AS n), totals AS (SELECT n + 1 AS n FROM recent) "
    "SELECT n FROM totals",
    "WITH RECURSIVE recent(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM recent WHERE n < 3) "
    "SELECT n FROM recent",
    "WITH RECURSIVE totals AS (SELECT n FROM recent), recent AS (SELECT 1 AS n) "
    "SELECT n FROM totals",
    "WITH recent AS (SELECT 1 AS n) SELECT n FROM (SELECT n FROM recent) s",
    "WITH recent AS (SELECT 1 AS n) SELECT (SELECT max(n) FROM recent) AS n "
    "WHERE EXISTS (SELECT FROM recent JOIN recent r2 USING (n))",
    "WITH recent AS (SELECT 1 AS n) SELECT n FROM recent UNION ALL SELECT n FROM recent",
    "WITH recent AS (SELECT 1 AS n) SELECT s.n FROM recent, LATERAL (SELECT n FROM recent) s",
    "WITH recent AS (SELECT 1 AS n) SELECT n FROM (WITH totals AS (SELECT n FROM recent) "
    "SELECT n FROM totals) s",
    # squatted in public only (the review's case)
    "WITH ranked AS (SELECT 1 AS n) SELECT n FROM ranked",
]

# The same spellings outside the WITH's scope: PostgreSQL reads the attacker's table.
OUT_OF_SCOPE = [
    # a WITH query's own body, not recursive
    "WITH recent AS (SELECT n FROM recent) SELECT n FROM recent",
    "WITH recent AS (SELECT (SELECT max(n) FROM recent) AS n) SELECT n FROM recent",
    # a later WITH query of the same WITH, not recursive
    "WITH totals AS (SELECT n FROM recent), recent AS (SELECT 1 AS n) SELECT n FROM totals",
    # a sibling subquery's WITH
    "SELECT s.n FROM (WITH recent AS (SELECT 1 AS n) SELECT n FROM recent) s, recent",
    "SELECT (WITH recent AS (SELECT 1 AS n) SELECT n FROM recent) AS n "
    "UNION ALL SELECT n FROM recent",
    # a set operation's parenthesized arm
    "(WITH recent AS (SELECT 1 AS n) SELECT n FROM recent) UNION ALL SELECT n FROM recent",
    # named with its schema
    "WITH recent AS (SELECT 1 AS n) SELECT n FROM public.recent",
    # a WITH query of another name
    "WITH other AS (SELECT 1 AS n) SELECT n FROM other UNION ALL SELECT n FROM totals",
]


@dataclass
class Bed:
    admin: str
    attacker: str
    reader: str


def as_role(dsn: str, role: str) -> str:
    return f"postgresql://{role}@{dsn.split('@', 1)[1]}"


@pytest_asyncio.fixture(loop_scope="session")
async def bed(pg: PgServer) -> AsyncIterator[Bed]:
    db = await pg.create_database("cte_names")
    tag = secrets.token_hex(4)
    atk, reader = f"cte_atk_{tag}", f"cte_reader_{tag}"
    await execute(db.dsn, SETUP.format(atk=atk, reader=reader))
    try:
        yield Bed(db.dsn, as_role(db.dsn, atk), as_role(db.dsn, reader))
    finally:
        await pg.drop_database(db.name)
        await execute(pg.admin_dsn, f"DROP ROLE {atk}; DROP ROLE {reader}")


async def reads_table(bed: Bed, sql: str) -> bool:
    """Whether PostgreSQL's plan for `sql`, run as the reader, scans one of the attacker's
    tables."""
    rows = await fetch(bed.reader, f"EXPLAIN (FORMAT JSON) {sql}")
    return '"Relation Name"' in rows[0][0]


@pytest.mark.parametrize("sql", IN_SCOPE)
async def test_a_table_named_like_a_with_query_in_scope_is_not_judged(bed: Bed, sql: str) -> None:
    assert not await reads_table(bed, sql)
    async with connect(bed.reader) as client:
        out = records(await call(client, "execute_query", sql=sql))
    assert out and all(r["n"] != TABLE_ROW for r in out), out


@pytest.mark.parametrize("sql", OUT_OF_SCOPE)
async def test_the_same_name_out_of_scope_is_still_refused(bed: Bed, sql: str) -> None:
    assert await reads_table(bed, sql)
    async with connect(bed.reader) as client:
        body = await call_error(client, "execute_query", sql=sql)
    assert body["error"]["context"]["rule"] == "untrusted_owner", body
    culprit = body["error"]["context"]["culprit"]
    assert culprit.endswith(("app.recent", "app.totals", "public.recent")), body


async def test_the_attackers_lock_on_the_table_holds_no_call(bed: Bed) -> None:
    """The table is not locked either: the attacker's ACCESS EXCLUSIVE on it would hold the
    call until the statement timeout (attack4 advice_cte.py)."""
    sql = IN_SCOPE[2]
    atk = await asyncpg.connect(bed.attacker)
    try:
        async with atk.transaction():
            await atk.execute("LOCK TABLE app.recent, app.totals IN ACCESS EXCLUSIVE MODE")
            held = await fetch(
                bed.admin,
                "SELECT count(*) AS n FROM pg_locks WHERE pid = $1 "
                "AND mode = 'AccessExclusiveLock' AND granted AND relation IS NOT NULL",
                atk.get_server_pid(),
            )
            assert held[0]["n"] >= 2, held
            settings = {"dsn": bed.reader, "statement_timeout": 2000}
            async with Client(build_server(Settings.load(database=settings))) as client:
                assert records(await call(client, "execute_query", sql=sql)) == [{"n": 2}]
    finally:
        await atk.close()


async def test_a_data_modifying_with_query_is_still_refused(bed: Bed) -> None:
    sql = "WITH recent AS (DELETE FROM recent RETURNING n) SELECT n FROM recent"
    async with connect(bed.reader) as client:
        body = await call_error(client, "execute_query", sql=sql)
    assert body["error"]["context"]["rule"] == "data_modifying_cte", body
    assert [r["n"] for r in await fetch(bed.admin, "TABLE app.recent")] == [TABLE_ROW]


def test_a_union_of_many_arms_names_its_tables() -> None:
    """The scope walk is iterative: a set operation nests its arms as deep as the parser
    allows, and each arm's table is still a relation."""
    sql = " UNION ALL ".join(f"SELECT n FROM t{i}" for i in range(900))
    tree = sqltree.parse(sql)
    assert tree is not None
    assert len(refs_of(tree).relations) == 900

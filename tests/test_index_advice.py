"""analyze_query_indexes (issue 25): on a table of 300,000 rows, a query filtering an unindexed
column gets that index advised with a cost at least 10x lower, measured with HypoPG (Debian's
postgresql-15-hypopg, on a PostgreSQL 15 cluster of the module's own); afterwards the pooled
session plans as before (no hypothetical index left in it) and pg_index is unchanged; the
query is judged by the guard first; without HypoPG, the error names the fix."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest_asyncio
from mcp import Client
from mcpclient import call, call_error, connect, execute, fetch, held_client
from pgbed import PG15_BINDIR
from pgcluster import LocalCluster

from pg_mcp_server.config import Settings
from pg_mcp_server.server import build_server

SETUP = """
CREATE EXTENSION hypopg;
CREATE TABLE big (id int PRIMARY KEY, customer int NOT NULL, status text NOT NULL);
INSERT INTO big SELECT g, g % 5000, 'new' FROM generate_series(1, 300000) g;
CREATE TABLE shapes (p point, v int);
INSERT INTO shapes SELECT point(g, g), g FROM generate_series(1, 10000) g;
CREATE TABLE hot (id int, customer int);
CREATE TABLE users (id int PRIMARY KEY, password_hash text);
INSERT INTO users SELECT g, md5(g::text) FROM generate_series(1, 10000) g;
ANALYZE big, shapes, users;
"""
INDEXES = "SELECT indexrelid::regclass::text AS name FROM pg_index ORDER BY 1"
QUERY = "SELECT id, status FROM big WHERE customer = $1"


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def hypo() -> AsyncIterator[str]:
    """PostgreSQL 15 with HypoPG (.ci/run installs postgresql-15-hypopg)."""
    cluster = await asyncio.to_thread(LocalCluster, PG15_BINDIR)
    try:
        dsn = cluster.dsn()
        await execute(dsn, SETUP)
        yield dsn
    finally:
        await asyncio.to_thread(cluster.stop)


async def test_the_filtered_column_is_advised_and_nothing_is_left_behind(hypo: str) -> None:
    before = await fetch(hypo, INDEXES)
    async with held_client(hypo, pool_size=1) as client:
        plain = await call(client, "explain_query", sql=QUERY, params=[42])
        advice = await call(client, "analyze_query_indexes", sql=QUERY, params=[42])
        # The one pooled session, after the advice: planned exactly as before.
        again = await call(client, "explain_query", sql=QUERY, params=[42])
    best = advice["recommendations"][0]
    assert best["table"] == "public.big" and best["columns"] == ["customer"]
    assert best["cost_before"] == round(plain["estimated_cost"], 2) == advice["cost"]
    assert best["cost_before"] >= 10 * best["cost_after"], best
    assert best["improvement"] >= 10
    assert best["estimated_size_bytes"] > 0
    assert best["create"] == 'CREATE INDEX CONCURRENTLY ON "public"."big" ("customer");'
    assert again["estimated_cost"] == plain["estimated_cost"]
    assert "Index" not in again["plan"], again["plan"]
    assert await fetch(hypo, INDEXES) == before


async def test_columns_that_do_not_help_are_not_advised(hypo: str) -> None:
    """status holds one value: an index on it cannot lower the cost."""
    async with connect(hypo) as client:
        advice = await call(
            client, "analyze_query_indexes", sql="SELECT count(*) FROM big WHERE status = 'new'"
        )
    assert advice["candidates"] == 1
    assert advice["recommendations"] == []


async def test_a_candidate_hypopg_refuses_is_skipped_and_the_session_stays_clean(
    hypo: str,
) -> None:
    """point has no btree operator class: HypoPG refuses those candidates (rolled back to a
    savepoint, hypothetical indexes reset), the others are still measured."""
    query = "SELECT * FROM shapes WHERE p ~= point(1, 1) AND v = 3"
    async with held_client(hypo, pool_size=1) as client:
        plain = await call(client, "explain_query", sql=query)
        advice = await call(client, "analyze_query_indexes", sql=query)
        again = await call(client, "explain_query", sql=query)
    assert advice["candidates"] == 1  # v; p and (v, p) refused
    assert [r["columns"] for r in advice["recommendations"]] == [["v"]]
    assert again["estimated_cost"] == plain["estimated_cost"]


async def test_the_guard_judges_the_query_first(hypo: str) -> None:
    before = await fetch(hypo, INDEXES)
    async with connect(hypo) as client:
        body = await call_error(
            client, "analyze_query_indexes", sql="DELETE FROM big WHERE customer = 1"
        )
    assert body["error"]["code"] == "WRITE_OPERATION_DENIED"
    assert await fetch(hypo, INDEXES) == before
    assert (await fetch(hypo, "SELECT count(*) FROM big"))[0][0] == 300000


async def test_advice_is_no_oracle_for_a_sensitive_column(hypo: str) -> None:
    """Plan costs tell about a redacted column's values as explain's estimates do: refused
    the same way (rows/redaction.py)."""
    query = "SELECT id FROM users WHERE password_hash LIKE 'a%'"
    async with connect(hypo) as client:
        explained = await call_error(client, "explain_query", sql=query)
        advised = await call_error(client, "analyze_query_indexes", sql=query)
    assert explained["error"]["context"]["rule"] == "sensitive_column"
    assert advised["error"]["code"] == explained["error"]["code"]
    assert advised["error"]["context"]["rule"] == "sensitive_column"


async def test_a_with_query_named_like_a_table_is_not_that_table(hypo: str) -> None:
    """attack4 F-A: a WITH name is not looked up as a relation. A table of that name, held
    in ACCESS EXCLUSIVE mode by another session, neither holds the call (a hypothetical index
    on it would wait for the lock) nor gets an index advised; the WITH query's table does."""
    query = "WITH hot AS (SELECT id, customer FROM big) SELECT id FROM hot WHERE customer = 42"
    holder = await asyncpg.connect(hypo)
    try:
        async with holder.transaction():
            await holder.execute("LOCK TABLE public.hot IN ACCESS EXCLUSIVE MODE")
            settings = Settings.load(database={"dsn": hypo, "statement_timeout": 5000})
            async with Client(build_server(settings)) as client:
                advice = await call(client, "analyze_query_indexes", sql=query)
    finally:
        await holder.close()
    assert [r["table"] for r in advice["recommendations"]] == ["public.big"], advice


async def test_without_hypopg_the_error_names_the_fix(scratch_dsn: str) -> None:
    await execute(scratch_dsn, "CREATE TABLE t (id int, v int)")
    async with connect(scratch_dsn) as client:
        body = await call_error(client, "analyze_query_indexes", sql="SELECT * FROM t WHERE v = 1")
    error = body["error"]
    assert error["code"] == "EXTENSION_MISSING"
    assert "CREATE EXTENSION hypopg" in error["suggestion"]
    assert "hypopg" in error["suggestion"] and error["context"]["extension"] == "hypopg"

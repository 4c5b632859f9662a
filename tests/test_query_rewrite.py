"""The statement execute_query runs (rewrite.py) against real PostgreSQL: the row limit reaches
the planner, ORDER BY and LIMIT keep their meaning, `has_more` is exact."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from mcp import Client
from mcpclient import call, connect, execute, fetch, held_client

from pg_mcp_server.config import Settings
from pg_mcp_server.database.guard.gate import SqlGuard
from pg_mcp_server.database.pool.engine import Database
from pg_mcp_server.database.rows import rewrite
from pg_mcp_server.database.rows.output import Budget
from pg_mcp_server.database.rows.reader import Reader

ROWS = 200_000
SETUP = f"""
CREATE TABLE big (id int PRIMARY KEY, c int NOT NULL, grp int NOT NULL, t text);
-- c is a permutation of id (7919 is prime to the modulus), so every ORDER BY c is total.
INSERT INTO big SELECT g, (g * 7919) % 200003, g % 10, 'row ' || g
FROM generate_series(1, {ROWS}) g;
CREATE INDEX big_grp ON big (grp, id);
ANALYZE big;
"""


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def bigdsn(pg: Any) -> AsyncIterator[str]:
    db = await pg.create_database("rewrite")
    await execute(db.dsn, SETUP)
    yield db.dsn
    await pg.drop_database(db.name)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def served(bigdsn: str) -> AsyncIterator[Client]:
    """One server for the corpora of statements, one call per case (a server of their own
    cost each case ~0.5 s; a case repeating another's SQL now also meets its kept shape)."""
    async with held_client(bigdsn) as client:
        yield client


async def wrapper_sql(dsn: str, sql: str, limit: int, max_bytes: int = 1_000_000) -> str:
    """The statement execute_query builds for `sql`, from the same code path."""
    db = Database(Settings.load(database={"dsn": dsn}).database)
    reader = Reader(db, SqlGuard(), Budget(rows=limit, bytes=max_bytes), sensitive=None)
    try:
        await db.run(lambda conn: reader.fetch(conn, sql, None, limit=limit))
    finally:
        await db.dispose()
    shape = reader.shapes.get(sql)
    assert shape is not None
    return shape.wrapper(limit, max_bytes, None)


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(n for child in plan.get("Plans", []) for n in _nodes(child))]


async def test_the_row_limit_reaches_the_planner(bigdsn: str) -> None:
    """ORDER BY over 200,000 rows with limit=100 sorts as a top-N heapsort (holding 101 rows,
    not all of them), and an index that serves the order is used instead of a sort."""
    sql = "SELECT * FROM big ORDER BY c"
    plan = (
        await fetch(bigdsn, "EXPLAIN (ANALYZE, FORMAT JSON) " + await wrapper_sql(bigdsn, sql, 100))
    )[0][0]
    nodes = _nodes(json.loads(plan)[0]["Plan"])
    sorts = [n for n in nodes if n["Node Type"] == "Sort" and "big" in str(n.get("Sort Key"))]
    assert [s["Sort Method"] for s in sorts] == ["top-N heapsort"]
    assert max(n.get("Actual Rows", 0) for n in nodes if n["Node Type"] != "Seq Scan") <= 101

    indexed = "SELECT id, t FROM big WHERE grp = 3 ORDER BY grp, id"
    plan = (await fetch(bigdsn, "EXPLAIN (FORMAT JSON) " + await wrapper_sql(bigdsn, indexed, 10)))[
        0
    ][0]
    kinds = {n["Node Type"] for n in _nodes(json.loads(plan)[0]["Plan"])}
    assert "Index Scan" in kinds and "Seq Scan" not in kinds

    async with connect(bigdsn) as client:
        out = await call(client, "execute_query", sql=sql, limit=100)
    first = await fetch(bigdsn, sql + " LIMIT 100")
    assert out["rows"] == [list(r.values()) for r in first]
    assert out["has_more"] is True and out["row_count"] == 100


LIMIT_CASES = [
    # (sql, params, limit): compared with PostgreSQL's own answer to the SQL as written
    ("SELECT id FROM big ORDER BY c LIMIT 5", None, 100),  # the caller's smaller LIMIT stands
    ("SELECT id FROM big ORDER BY c LIMIT 500", None, 100),  # a larger one is lowered
    ("SELECT id FROM big ORDER BY c LIMIT ALL", None, 100),
    ("SELECT id FROM big ORDER BY c OFFSET 10", None, 5),
    ("SELECT id FROM big ORDER BY c LIMIT 7 OFFSET 3", None, 5),
    ("SELECT id FROM big ORDER BY c LIMIT $1", [3], 100),
    ("SELECT id FROM big ORDER BY c LIMIT $1", [1000], 100),
    ("SELECT id FROM big ORDER BY c FETCH FIRST 2 ROWS ONLY", None, 100),
    # WITH TIES may return more than its count: grp has 20,000 rows per value
    ("SELECT grp, id FROM big WHERE id <= 30 ORDER BY grp FETCH FIRST 2 ROWS WITH TIES", None, 100),
    ("SELECT grp, id FROM big ORDER BY grp FETCH FIRST 2 ROWS WITH TIES", None, 50),
    (
        "SELECT c FROM big WHERE id < 20 UNION SELECT c + 1 FROM big WHERE id < 20 ORDER BY 1",
        None,
        25,
    ),
    (
        "(SELECT c FROM big WHERE id < 5) UNION ALL (SELECT id FROM big WHERE id < 5) LIMIT 6",
        None,
        4,
    ),
    ("VALUES (3), (1), (2) ORDER BY 1 DESC", None, 2),
    ("TABLE big ORDER BY c DESC LIMIT 3", None, 10),
    ("SELECT id FROM big WHERE id <= 10 ORDER BY id", None, 10),  # exactly limit rows
    ("SELECT id FROM big WHERE id <= 11 ORDER BY id", None, 10),  # one more than the limit
]


@pytest.mark.parametrize(("sql", "params", "limit"), LIMIT_CASES)
async def test_limits_keep_their_meaning(
    bigdsn: str, served: Client, sql: str, params: list[Any] | None, limit: int
) -> None:
    expected = [list(r.values()) for r in await fetch(bigdsn, sql, *(params or []))]
    out = await call(served, "execute_query", sql=sql, params=params, limit=limit)
    if "WITH TIES" in sql:  # ties come in no particular order: compare as sets of rows
        assert sorted(map(tuple, out["rows"])) <= sorted(map(tuple, expected))
        assert [r[0] for r in out["rows"]] == [r[0] for r in expected[:limit]]
    else:
        assert out["rows"] == expected[:limit]
    assert out["has_more"] is (len(expected) > limit)


ORDER_CASES = [
    "SELECT id FROM big WHERE id < 300 ORDER BY c DESC",  # sort key not in the output
    "SELECT id, c AS k FROM big WHERE id < 300 ORDER BY k",  # an output alias
    "SELECT id, c FROM big WHERE id < 300 ORDER BY 2 DESC",  # a position
    "SELECT id FROM big WHERE id < 300 ORDER BY grp DESC NULLS LAST, c USING <",
    'SELECT t FROM big WHERE id < 300 ORDER BY t COLLATE "C" DESC',
    "SELECT upper(t) AS t FROM big WHERE id < 300 ORDER BY t DESC",  # the output, not big.t
    "SELECT DISTINCT b.grp FROM big b ORDER BY b.grp DESC",  # a qualified output column
    "SELECT DISTINCT ON (grp) grp, id FROM big ORDER BY grp, c DESC",
    "SELECT grp, count(*) FROM big GROUP BY grp ORDER BY sum(c) DESC",
    "WITH w AS (SELECT id, c FROM big WHERE id < 300) SELECT id FROM w ORDER BY c",
    "SELECT id, rank() OVER (ORDER BY c) FROM big WHERE id < 300 ORDER BY rank() OVER (ORDER BY c)",
    "SELECT b.id, b2.id FROM big b JOIN big b2 ON b2.id = b.id + 1 WHERE b.id < 100 ORDER BY b2.c",
]


@pytest.mark.parametrize("sql", ORDER_CASES)
async def test_order_by_keeps_its_meaning(bigdsn: str, served: Client, sql: str) -> None:
    """Every level of the wrapper orders by the caller's own keys (never by a subquery's row
    order): the rows are PostgreSQL's own answer, in its order, also when cut by the limit."""
    expected = [list(r.values()) for r in await fetch(bigdsn, sql)]
    out = await call(served, "execute_query", sql=sql, limit=7)
    assert out["rows"] == expected[:7]


async def test_a_volatile_sort_key_sorts_the_values_shown(bigdsn: str) -> None:
    async with connect(bigdsn) as client:
        for sql in (
            "SELECT random() AS r FROM generate_series(1, 300) ORDER BY r",
            "SELECT random() AS r FROM generate_series(1, 300) ORDER BY random()",
            "SELECT g FROM generate_series(1, 300) g ORDER BY random()",
        ):
            out = await call(client, "execute_query", sql=sql, limit=50)
            values = [r[0] for r in out["rows"]]
            assert len(values) == 50 and out["has_more"] is True
            if "r" in out["columns"][0]["name"]:
                assert values == sorted(values)


async def test_the_byte_cap_keeps_a_prefix_in_order(bigdsn: str) -> None:
    sql = "SELECT id, t FROM big ORDER BY c DESC"
    expected = [list(r.values()) for r in await fetch(bigdsn, sql + " LIMIT 1000")]
    async with connect(bigdsn, max_result_bytes=2048) as client:
        out = await call(client, "execute_query", sql=sql, limit=1000)
    assert 10 < out["row_count"] < 200 and out["has_more"] is True
    assert out["rows"] == expected[: out["row_count"]]
    assert len(json.dumps(out["rows"], separators=(",", ":"))) <= 2048
    assert "2048-byte result limit" in out["note"]


def test_what_the_inner_limit_becomes() -> None:
    def inner(sql: str) -> str:
        stmt = rewrite.parse(sql)
        rewrite.limit_inner(stmt, 101)
        return rewrite.deparse(stmt)

    assert inner("SELECT 1") == "SELECT 1 LIMIT 101"
    assert inner("SELECT 1 LIMIT 5") == "SELECT 1 LIMIT 5"
    assert inner("SELECT 1 LIMIT 500") == "SELECT 1 LIMIT 101"
    assert inner("SELECT 1 LIMIT ALL") == "SELECT 1 LIMIT 101"
    assert inner("SELECT 1 OFFSET 4") == "SELECT 1 LIMIT 101 OFFSET 4"
    assert inner("SELECT 1 LIMIT $1") == "SELECT 1 LIMIT $1"
    assert inner("SELECT 1 LIMIT 2 + 2") == "SELECT 1 LIMIT (2 + 2)"
    ties = "SELECT a FROM t ORDER BY a FETCH FIRST 500 ROWS WITH TIES"
    assert "WITH TIES" in inner(ties) and "500" in inner(ties)


async def test_a_statement_is_described_once(bigdsn: str) -> None:
    """Repeated SQL reuses its shape and its prepared wrapper: PostgreSQL plans it as a kept
    statement (no new Parse), visible as a custom/generic plan count in pg_prepared_statements
    on the server's own connection."""
    settings = Settings.load(database={"dsn": bigdsn, "pool_size": 1})
    db = Database(settings.database)
    reader = Reader(db, SqlGuard(), Budget(rows=5, bytes=10_000), sensitive=None)

    async def run(conn: asyncpg.Connection) -> Any:
        return await reader.fetch(conn, "SELECT id FROM big WHERE id = 7", None, limit=5)

    try:
        for _ in range(3):
            assert (await db.run(run)).rows == [[7]]
        async with db.session() as conn:
            counts = await conn.fetch(
                "SELECT statement, generic_plans + custom_plans AS runs "
                "FROM pg_prepared_statements WHERE NOT from_sql"
            )
        wrapped = [r["runs"] for r in counts if "__pgmcp_end" in r["statement"]]
        assert wrapped == [3]
    finally:
        await db.dispose()

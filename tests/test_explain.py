"""explain_query does its work once (issue 14 goal 5): EXPLAIN ANALYZE executes the statement
once whatever the format, and the text plan written from the JSON one is PostgreSQL's own."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from eventually import eventually
from mcpclient import call, connect, execute, fetch
from pgbed import PgServer

COUNTED = """
CREATE FUNCTION tick(i int) RETURNS int LANGUAGE plpgsql STABLE AS $$ BEGIN RETURN i; END $$;
CREATE TABLE ten AS SELECT g FROM generate_series(1, 10) g;
"""


@pytest_asyncio.fixture(loop_scope="session")
async def counted_dsn(pg: PgServer) -> AsyncIterator[str]:
    db = await pg.create_database("explain")
    await execute(db.dsn, COUNTED)
    # Function call counts, a side-effect-free witness of each execution.
    await execute(pg.admin_dsn, f"ALTER DATABASE \"{db.name}\" SET track_functions = 'all'")
    yield db.dsn
    await pg.drop_database(db.name)


async def _calls(dsn: str) -> int:
    rows = await fetch(
        dsn,
        "SELECT coalesce(pg_stat_get_function_calls('tick(int)'::regprocedure), 0) AS n",
    )
    return int(rows[0]["n"])


async def _settled_calls(dsn: str, at_least: int) -> int:
    """The count once it has reached `at_least` (statistics arrive within about a second)."""

    async def reached() -> int:
        count = await _calls(dsn)
        return count if count >= at_least else 0

    return await eventually(reached, what=f"statistics of {at_least} calls")


@pytest.mark.parametrize("fmt", ["text", "json", "yaml"])
async def test_explain_analyze_executes_the_statement_once(counted_dsn: str, fmt: str) -> None:
    """tick() runs once per row of `ten`: one execution is 10 calls, two would be 20. With one
    pooled session, statistics arrive in order, so once a later marker call (1000 calls) is
    counted, every call before it is too."""
    before = await _calls(counted_dsn)
    async with connect(counted_dsn) as client:
        plan = await call(
            client,
            "explain_query",
            sql="SELECT tick(g) FROM ten",
            analyze=True,
            format=fmt,
        )
        assert plan["actual_time_ms"] is not None
        await call(
            client, "execute_query", sql="SELECT sum(tick(g)) FROM generate_series(1, 1000) g"
        )
    assert await _settled_calls(counted_dsn, before + 1010) == before + 1010


async def test_the_text_plan_is_postgres_own(datasets: dict[str, str]) -> None:
    """The text plan is written from the JSON one; for these pagila queries it is what
    PostgreSQL prints itself (exactly without ANALYZE, up to the measured figures with it)."""
    dsn = datasets["pagila"]
    queries = [
        "SELECT f.title, count(*) FROM film f JOIN film_actor fa ON fa.film_id = f.film_id "
        "WHERE f.length > 100 GROUP BY f.title ORDER BY 2 DESC LIMIT 5",
        "SELECT * FROM customer WHERE customer_id IN "
        "(SELECT customer_id FROM payment WHERE amount > 10)",
        "SELECT * FROM film WHERE film_id < 50 ORDER BY film_id DESC",
        "SELECT c.name, sum(p.amount) FROM category c JOIN film_category fc USING (category_id) "
        "JOIN inventory i USING (film_id) JOIN rental r USING (inventory_id) "
        "JOIN payment p USING (rental_id) GROUP BY c.name",
        "SELECT * FROM actor a LEFT JOIN film_actor fa ON fa.actor_id = a.actor_id "
        "WHERE a.actor_id < 3",
        "SELECT (SELECT max(amount) FROM payment), 1",
        "WITH x AS MATERIALIZED (SELECT * FROM film LIMIT 10) SELECT * FROM x WHERE length > 50",
        "SELECT title FROM film UNION SELECT first_name FROM actor",
        "SELECT * FROM generate_series(1, 10) g WHERE g > 5",
        "SELECT DISTINCT rating FROM film",
        "SELECT film_id, rank() OVER (PARTITION BY rating ORDER BY length) FROM film",
        "SELECT * FROM film WHERE fulltext @@ to_tsquery('dog')",
        "SELECT * FROM customer c WHERE NOT EXISTS "
        "(SELECT 1 FROM rental r WHERE r.customer_id = c.customer_id)",
    ]
    async with connect(dsn) as client:
        for sql in queries:
            for options in ({}, {"verbose": True}, {"analyze": True, "buffers": True}):
                ours = (await call(client, "explain_query", sql=sql, **options))["plan"]
                flags = ", ".join(k.upper() for k in options) or "COSTS"
                theirs = "\n".join(r[0] for r in await fetch(dsn, f"EXPLAIN ({flags}) {sql}"))
                if options.get("analyze"):
                    ours, theirs = _figures_out(ours), _figures_out(theirs)
                assert ours == theirs, (sql, options)


def _figures_out(plan: str) -> str:
    """Without what differs between two runs: figures, which buffers were hit or read, and
    whether planning needed any (a warm session's catalog cache may need none)."""
    plan = re.sub(r"Planning:\n  Buffers: [^\n]*\n", "", plan)
    return re.sub(r"\d+(\.\d+)?", "N", re.sub(r"Buffers: [^\n]*", "Buffers: ...", plan))

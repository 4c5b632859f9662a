"""analyze_query_indexes over a workload (issue 25): on PostgreSQL 15 with HypoPG and
pg_stat_statements preloaded (a cluster of the module's own), a workload filtering two
unindexed columns gets both indexes when the size budget allows, only the one that saves more
per byte when it allows one; a statement the guard refuses is reported, not planned;
pg_stat_statements' costliest statements are planned generic, weighted by their calls; a
call cancelled mid-way leaves no hypothetical index in the pool and pg_index unchanged;
without HypoPG, the error names the fix."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anyio
import asyncpg
import pytest
import pytest_asyncio
from eventually import eventually
from mcpclient import call, call_error, connect, execute, fetch, held_client
from pgbed import PG15_BINDIR
from pgcluster import LocalCluster

from pg_mcp_server.database.health import workload

SETUP = """
CREATE EXTENSION hypopg;
CREATE EXTENSION pg_stat_statements;
CREATE TABLE orders (id int PRIMARY KEY, customer int NOT NULL, product int NOT NULL,
                     note text NOT NULL);
INSERT INTO orders SELECT g, g % 5000, g % 3000, 'n' || g % 7 FROM generate_series(1, 300000) g;
CREATE TABLE wide AS
SELECT g AS id, g % 1000 AS c1, g % 1001 AS c2, g % 1002 AS c3, g % 1003 AS c4,
       g % 1004 AS c5, g % 1005 AS c6, g % 1006 AS c7, g % 1008 AS c8
FROM generate_series(1, 100000) g;
CREATE TABLE users (id int PRIMARY KEY, password_hash text);
INSERT INTO users SELECT g, md5(g::text) FROM generate_series(1, 10000) g;
ANALYZE orders, wide, users;
"""
INDEXES = "SELECT indexrelid::regclass::text AS name FROM pg_index ORDER BY 1"
BY_CUSTOMER = "SELECT id FROM orders WHERE customer = $1"
NOTE_BY_CUSTOMER = "SELECT note FROM orders WHERE customer = $1"
BY_PRODUCT = "SELECT id FROM orders WHERE product = $1"
WORKLOAD = [BY_CUSTOMER, NOTE_BY_CUSTOMER, BY_PRODUCT]
MIB = 1024 * 1024
# $1 has no type PostgreSQL can infer: the statement cannot be prepared, so not planned
UNTYPED = "SELECT id FROM orders WHERE $1 IS NULL"


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def hypo() -> AsyncIterator[str]:
    """PostgreSQL 15 with HypoPG (.ci/run installs postgresql-15-hypopg) and
    pg_stat_statements preloaded."""
    cluster = await asyncio.to_thread(
        LocalCluster, PG15_BINDIR, "shared_preload_libraries = 'pg_stat_statements'\n"
    )
    try:
        dsn = cluster.dsn()
        await execute(dsn, SETUP)
        yield dsn
    finally:
        await asyncio.to_thread(cluster.stop)


def picked(advice: dict[str, Any]) -> list[list[str]]:
    return [r["columns"] for r in advice["recommendations"]]


async def test_both_indexes_when_the_budget_allows_and_nothing_is_left_behind(hypo: str) -> None:
    before = await fetch(hypo, INDEXES)
    pid = "SELECT pg_backend_pid() AS pid"
    async with held_client(hypo, pool_size=1) as client:
        plain = await call(client, "explain_query", sql=BY_PRODUCT, params=[7])
        session = await call(client, "execute_query", sql=pid)
        advice = await call(
            client, "analyze_query_indexes", queries=WORKLOAD, max_index_size_mb=100
        )
        again = await call(client, "explain_query", sql=BY_PRODUCT, params=[7])
        # the same session, reset (hypopg_reset), not closed
        assert (await call(client, "execute_query", sql=pid))["rows"] == session["rows"]
    # customer first: its index serves two of the three statements, at the same size
    assert picked(advice) == [["customer"], ["product"]], advice
    first, second = advice["recommendations"]
    assert [q["query"] for q in first["queries"]] == [1, 2]
    assert [q["query"] for q in second["queries"]] == [3]
    for rec in (first, second):
        assert rec["table"] == "public.orders" and rec["estimated_size_bytes"] > 0
        assert rec["workload_cost_after"] < rec["workload_cost_before"]
        for q in rec["queries"]:
            assert q["cost_before"] >= 10 * q["cost_after"], q
    assert first["create"] == 'CREATE INDEX CONCURRENTLY ON "public"."orders" ("customer");'
    assert first["workload_cost_before"] == advice["cost"]
    assert second["workload_cost_before"] == first["workload_cost_after"]
    assert second["workload_cost_after"] == advice["cost_after"]
    assert [q["query"] for q in advice["queries"]] == [1, 2, 3]
    for q in advice["queries"]:
        assert q["cost_before"] >= 10 * q["cost_after"], q
    assert advice["cost"] == round(sum(q["cost_before"] for q in advice["queries"]), 2)
    # The generic plan's cost of a statement is about the cost planned for a value here
    # (customer and product values are spread evenly).
    assert abs(advice["queries"][2]["cost_before"] / plain["estimated_cost"] - 1) < 0.01
    # The one pooled session plans as before: no hypothetical index, no statement left.
    assert again["estimated_cost"] == plain["estimated_cost"]
    assert "Index" not in again["plan"], again["plan"]
    assert await fetch(hypo, INDEXES) == before


async def test_only_the_best_index_when_the_budget_allows_one(hypo: str) -> None:
    async with connect(hypo) as client:
        both = await call(client, "analyze_query_indexes", queries=WORKLOAD)
        size = both["recommendations"][0]["estimated_size_bytes"]
        assert both["recommendations"][1]["estimated_size_bytes"] == size
        one = await call(
            client,
            "analyze_query_indexes",
            queries=WORKLOAD,
            max_index_size_mb=1.5 * size / MIB,
        )
    assert picked(both) == [["customer"], ["product"]]
    assert picked(one) == [["customer"]], one
    assert one["queries"][2]["cost_after"] == one["queries"][2]["cost_before"]
    assert one["cost_after"] > both["cost_after"]


async def test_a_refused_statement_is_reported_not_planned(hypo: str) -> None:
    before = await fetch(hypo, INDEXES)
    workload = [BY_CUSTOMER, "DELETE FROM orders WHERE product = 1", UNTYPED]
    async with connect(hypo) as client:
        advice = await call(client, "analyze_query_indexes", queries=workload)
    one, refused, unplanned = advice["queries"]
    assert refused["refused"]["code"] == "WRITE_OPERATION_DENIED", refused
    assert "cost_before" not in refused
    assert "could not determine data type" in unplanned["not_planned"]["message"], unplanned
    assert one["cost_before"] >= 10 * one["cost_after"]
    assert picked(advice) == [["customer"]]  # never product: the DELETE was not planned
    assert await fetch(hypo, INDEXES) == before
    assert (await fetch(hypo, "SELECT count(*) FROM orders"))[0][0] == 300000


async def test_a_statement_whose_plan_would_tell_a_sensitive_value_is_refused(
    hypo: str,
) -> None:
    """As explain_query refuses it (rows/redaction.py): plan costs are an oracle too."""
    sensitive = "SELECT id FROM users WHERE password_hash LIKE 'a%'"
    async with connect(hypo) as client:
        explained = await call_error(client, "explain_query", sql=sensitive)
        advice = await call(client, "analyze_query_indexes", queries=[BY_CUSTOMER, sensitive])
    refused = advice["queries"][1]
    assert refused["refused"]["code"] == explained["error"]["code"], refused
    assert refused["refused"]["message"] == explained["error"]["message"]
    assert picked(advice) == [["customer"]]


async def test_top_queries_are_planned_generic_and_weighted_by_calls(hypo: str) -> None:
    conn = await asyncpg.connect(hypo)
    try:
        await conn.execute("SELECT pg_stat_statements_reset()")
        for i in range(20):
            await conn.fetch(BY_PRODUCT, i)
        # Not a SELECT, skipped; costlier than any statement but the 20 above, so ranked
        # second whatever else was counted
        await conn.execute("CREATE TEMP TABLE t AS SELECT g FROM generate_series(1, 300000) g")
        queryid = await conn.fetchval(
            "SELECT queryid FROM pg_stat_statements WHERE query = $1", BY_PRODUCT
        )
    finally:
        await conn.close()
    async with connect(hypo) as client:
        advice = await call(client, "analyze_query_indexes", queries=[BY_CUSTOMER], top_queries=2)
    ours = [q for q in advice["queries"] if q.get("queryid") == str(queryid)]
    assert len(ours) == 1, advice["queries"]
    top = ours[0]
    assert top["query"] == 2  # after the caller's one
    assert top["calls"] == 20 and top["text"] == BY_PRODUCT
    assert top["cost_before"] >= 10 * top["cost_after"]
    # weighted by its 20 calls, the product index saves more than the customer one
    assert picked(advice)[:2] == [["product"], ["customer"]], advice
    product = advice["recommendations"][0]
    saved = product["workload_cost_before"] - product["workload_cost_after"]
    gain = top["cost_before"] - top["cost_after"]
    assert abs(saved - 20 * gain) <= 1, (saved, gain)
    assert advice["note"] == "1 of pg_stat_statements' costliest skipped: not one SELECT"


WIDE = [
    f"SELECT id FROM wide WHERE c{i} = $1 AND c{j} > $2 ORDER BY c{k}"
    for i in range(1, 9)
    for j, k in [(i % 8 + 1, (i + 1) % 8 + 1), ((i + 2) % 8 + 1, (i + 3) % 8 + 1)]
]


# A statement of WIDE's greedy search, run while a hypothetical index exists in the session:
# a plan (EXPLAIN EXECUTE, then DEALLOCATE) past the 16 plans of its statements without one
# (the advice names its plans in order).
MEASURING = """query ~ '"pg_mcp_advice_(1[7-9]|[2-9][0-9]|[0-9]{3,})"'"""
SEEN_MEASURING = f"""SELECT pid FROM pg_stat_activity
WHERE application_name = 'pg-mcp-server' AND {MEASURING}"""
# Sent only while such a statement runs: a cancel that reaches the session between two
# statements is lost, and one that reached the clean-up would close the session instead.
CANCEL_MEASURING = f"""SELECT pg_cancel_backend(pid) FROM pg_stat_activity
WHERE pid = $1 AND state = 'active' AND {MEASURING}"""


async def seen_measuring(watcher: asyncpg.Connection) -> int:
    """The pid of the server's session once it is seen measuring with a hypothetical index
    (pg_stat_activity shows a session's last statement, also between statements)."""

    async def measuring() -> int:
        pid = await watcher.fetchval(SEEN_MEASURING)
        return int(pid or 0)

    return await eventually(measuring, what="the advice measuring candidates", interval=0.001)


async def test_a_cancelled_call_leaves_no_hypothetical_index_in_the_pool(hypo: str) -> None:
    """Cancelled while it measures candidates, with a hypothetical index in its session:
    the session is closed, never pooled again."""
    before = await fetch(hypo, INDEXES)
    query = "SELECT id FROM wide WHERE c1 = $1"
    watcher = await asyncpg.connect(hypo)
    try:
        async with held_client(hypo, pool_size=1) as client:
            plain = await call(client, "explain_query", sql=query, params=[1])
            pid = None
            with anyio.CancelScope() as scope:

                async def cancel_when_measuring() -> None:
                    nonlocal pid
                    pid = await seen_measuring(watcher)
                    scope.cancel()

                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(cancel_when_measuring)
                    await client.call_tool("analyze_query_indexes", {"queries": WIDE})
            assert scope.cancelled_caught and pid is not None

            async def gone() -> bool:
                return await watcher.fetchval(ALIVE, pid) is None

            # Still measuring when cancelled: a finished call returns its session to the
            # pool, where it stays.
            await eventually(gone, what="the cancelled call's session closed", seconds=10)
            # The guard refuses hypopg_list_indexes (it runs the volatile hypopg()): the
            # pooled session is shown to be another backend, which plans with no
            # hypothetical index.
            pooled = await call(client, "execute_query", sql="SELECT pg_backend_pid() AS pid")
            again = await call(client, "explain_query", sql=query, params=[1])
    finally:
        await watcher.close()
    assert pooled["rows"] != [[pid]]
    assert again["estimated_cost"] == plain["estimated_cost"]
    assert "Index" not in again["plan"], again["plan"]
    assert await fetch(hypo, INDEXES) == before


ALIVE = "SELECT 1 FROM pg_stat_activity WHERE pid = $1"


async def test_a_failed_call_resets_its_session_and_keeps_it(hypo: str) -> None:
    """A statement of the advice cancelled from outside while it measures candidates (as a
    statement timeout would end it): the call fails, and its session, rolled back to the
    savepoint and reset, goes back to the pool with no hypothetical index."""
    query = "SELECT id FROM wide WHERE c1 = $1"
    watcher = await asyncpg.connect(hypo)
    try:
        async with held_client(hypo, pool_size=1) as client:
            plain = await call(client, "explain_query", sql=query, params=[1])
            session = await call(client, "execute_query", sql="SELECT pg_backend_pid() AS pid")
            (pid,) = session["rows"][0]

            async def cancel_until_it_fails() -> None:
                assert await seen_measuring(watcher) == pid
                while not failed.done():
                    await watcher.fetch(CANCEL_MEASURING, pid)
                    await asyncio.sleep(0.001)

            failed: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
            canceller = asyncio.create_task(cancel_until_it_fails())
            try:
                failed.set_result(await call_error(client, "analyze_query_indexes", queries=WIDE))
            finally:
                if not failed.done():
                    failed.cancel()
                await canceller
            again = await call(client, "explain_query", sql=query, params=[1])
            after = await call(client, "execute_query", sql="SELECT pg_backend_pid() AS pid")
    finally:
        await watcher.close()
    assert failed.result()["error"]["code"] == "QUERY_TIMEOUT", failed.result()
    assert after["rows"] == [[pid]]  # the same session: reset, not closed
    assert again["estimated_cost"] == plain["estimated_cost"]
    assert "Index" not in again["plan"], again["plan"]


async def test_a_big_search_stops_at_its_plan_limit_and_says_so(
    hypo: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """WIDE's 16 statements all name one table: each candidate plans them all again."""
    monkeypatch.setattr(workload, "MAX_PLANS", 60)
    async with connect(hypo) as client:
        advice = await call(client, "analyze_query_indexes", queries=WIDE)
    assert advice["note"] == "search stopped after 60 plans: more indexes may help"
    assert len(advice["recommendations"]) == 1, advice


async def test_a_workload_without_hypopg_gets_the_fix(scratch_dsn: str) -> None:
    await execute(scratch_dsn, "CREATE TABLE IF NOT EXISTS t (id int, v int)")
    async with connect(scratch_dsn) as client:
        body = await call_error(
            client, "analyze_query_indexes", queries=["SELECT * FROM t WHERE v = $1"]
        )
    error = body["error"]
    assert error["code"] == "EXTENSION_MISSING"
    assert "CREATE EXTENSION hypopg" in error["suggestion"]


async def test_one_query_or_a_workload_not_both(scratch_dsn: str) -> None:
    async with connect(scratch_dsn) as client:
        both = await call_error(
            client, "analyze_query_indexes", sql="SELECT 1", queries=["SELECT 2"]
        )
        neither = await call_error(client, "analyze_query_indexes")
        budget = await call_error(
            client, "analyze_query_indexes", sql="SELECT 1", max_index_size_mb=10
        )
    for body in (both, neither, budget):
        assert body["error"]["code"] == "PARAMETER_ERROR", body


async def test_a_workload_answer_keeps_to_the_answer_budget(hypo: str) -> None:
    async with connect(hypo, answer_budget_bytes=4096) as client:
        result = await client.call_tool("analyze_query_indexes", {"queries": WIDE})
    out = result.structured_content
    assert out is not None and not result.is_error
    assert len(result.content[0].text.encode()) <= 4096  # type: ignore[union-attr]
    shown = len(out["queries"])
    assert 0 < shown < len(WIDE), out
    assert f"{len(WIDE) - shown} queries not shown (the answer budget)" in out["note"]
    assert out["recommendations"], out

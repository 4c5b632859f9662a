"""execute_query's answers within the answer budget, and big results paged from one snapshot
(issue 22): read once, held in the result store, answered page by page by cursor or resource,
never run again; expired or evicted results answer RESULT_EXPIRED."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import pytest_asyncio
from eventually import eventually
from mcp import Client
from mcpclient import call, call_error, module_database
from pgbed import PgServer

from pg_mcp_server.config import Settings
from pg_mcp_server.errors import ResultExpiredError
from pg_mcp_server.results import Limits, MemoryResultStore
from pg_mcp_server.server import build_server

BUDGET = 80_000  # the default MCP_ANSWER_BUDGET_BYTES

SETUP = r"""
CREATE TABLE big (id int PRIMARY KEY, label text NOT NULL, n bigint);
INSERT INTO big SELECT g, 'row ' || g || ' ' || repeat('x', g % 40), g * 7
FROM generate_series(1, 20000) g;
CREATE TABLE marker (id int);
INSERT INTO marker VALUES (1);
-- (numeric ^ numeric's scale differs across majors: 15 gives 16 decimals, 16 none)
CREATE TABLE wide (id int PRIMARY KEY, body text, doc jsonb, blob bytea, tags text[], n numeric);
INSERT INTO wide SELECT g, repeat(chr(97 + g % 26), 2000),
       jsonb_build_object('k', repeat('j', 2000)), convert_to(repeat('b', 2000), 'UTF8'),
       ARRAY[repeat('t', 2000)], (10::numeric ^ 40)::numeric(41, 0) + g
FROM generate_series(1, 1000) g;
ANALYZE big, marker, wide;
"""


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def pdsn(pg: PgServer) -> AsyncIterator[str]:
    async with module_database(pg, "paging", SETUP) as dsn:
        yield dsn


@asynccontextmanager
async def one_connection(dsn: str, **server: Any) -> AsyncIterator[Client]:
    """A client on a server whose pool is one connection: every statement it runs is on one
    backend, whose statistics PostgreSQL flushes together."""
    settings = Settings.load(database={"dsn": dsn, "pool_size": 1}, server=server)
    async with Client(build_server(settings)) as client:
        yield client


async def page_through(client: Client, first: dict[str, Any]) -> list[dict[str, Any]]:
    """Every answer from `first` on, by cursor, to the last page."""
    answers = [first]
    while answers[-1].get("next_cursor"):
        answers.append(await call(client, "execute_query", cursor=answers[-1]["next_cursor"]))
    return answers


async def _scans(dsn: str, table: str) -> tuple[int, int, int]:
    conn = await asyncpg.connect(dsn)
    try:
        row = await conn.fetchrow(
            "SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) AS scans, "
            "coalesce(seq_tup_read, 0) AS seq_read, coalesce(idx_tup_fetch, 0) AS idx_read "
            "FROM pg_stat_user_tables WHERE relname = $1",
            table,
        )
    finally:
        await conn.close()
    assert row is not None
    return int(row["scans"]), int(row["seq_read"]), int(row["idx_read"])


async def test_20000_rows_paged_to_the_end_once_in_order_without_running_again(
    pdsn: str,
) -> None:
    sql = "SELECT id, label, n FROM big ORDER BY id"
    before = await _scans(pdsn, "big")
    async with one_connection(pdsn, max_rows=20000) as client:
        first = await call(client, "execute_query", sql=sql, limit=20000)
        assert first["total_rows"] == 20000 and first["has_more"] is True
        assert first["row_count"] < 20000 and "next_cursor" in first
        # The statement ran: its scan reaches the statistics once the backend is idle.
        after_first = await eventually(
            lambda: _at_least(pdsn, "big", before[0] + 1), what="the query's scan in the stats"
        )
        answers = await page_through(client, first)
        # A statement on another table, on the same (only) backend: once its scan shows, any
        # scan of `big` made while paging would have been flushed too.
        marker = (await _scans(pdsn, "marker"))[0]
        await call(client, "execute_query", sql="SELECT count(*) FROM marker")
        await eventually(lambda: _at_least(pdsn, "marker", marker + 1), what="the marker scan")
    assert await _scans(pdsn, "big") == after_first  # seq_scan, idx_scan, tuples: unchanged
    assert after_first[0] == before[0] + 1
    ids = [row[0] for a in answers for row in a["rows"]]
    assert ids == list(range(1, 20001))  # every row exactly once, in order
    assert len(answers) > 2
    for n, a in enumerate(answers, start=1):
        assert a["columns"] == first["columns"] and a["total_rows"] == 20000
        assert a["row_count"] == len(a["rows"])
        assert a["has_more"] is (n < len(answers))
        assert a["query_hash"] == first["query_hash"]
        assert f"(page {n} of {len(answers)})" in a["note"]


async def _at_least(dsn: str, table: str, scans: int) -> tuple[int, int, int] | None:
    got = await _scans(dsn, table)
    return got if got[0] >= scans else None


async def test_every_answer_fits_the_budget_and_the_resource_reads_the_same_page(
    pdsn: str,
) -> None:
    sql = "SELECT id, label, n FROM big ORDER BY id DESC"
    async with one_connection(pdsn, max_rows=20000) as client:
        result = await client.call_tool("execute_query", {"sql": sql, "limit": 5000})
        text = result.content[0].text  # type: ignore[union-attr]
        assert len(text.encode()) <= BUDGET
        first = json.loads(text)
        link = result.content[1]
        assert link.type == "resource_link"
        assert str(link.uri).endswith("/2")
        second = await call(client, "execute_query", cursor=first["next_cursor"])
        read = await client.read_resource(str(link.uri))
        assert json.loads(read.contents[0].text) == second  # type: ignore[union-attr]
        answers = await page_through(client, first)
        for a in answers:
            sent = json.dumps(a, separators=(",", ":"), ensure_ascii=False).encode()
            assert len(sent) <= BUDGET
        assert [r[0] for a in answers for r in a["rows"]] == list(range(20000, 15000, -1))
        # The result's page 1 is held too: its resource reads the first answer again.
        page_one = str(link.uri)[: -len("/2")] + "/1"
        again = json.loads((await client.read_resource(page_one)).contents[0].text)  # type: ignore[union-attr]
        assert again["rows"] == first["rows"]


async def test_1000_rows_of_2kb_values_answer_within_the_budget_cut_and_marked(
    pdsn: str,
) -> None:
    async with one_connection(pdsn) as client:
        result = await client.call_tool("execute_query", {"sql": "SELECT * FROM wide ORDER BY id"})
        text = result.content[0].text  # type: ignore[union-attr]
        assert len(text.encode()) <= BUDGET
        first = json.loads(text)
        assert first == result.structured_content
        answers = await page_through(client, first)
    rows = [r for a in answers for r in a["rows"]]
    assert len(rows) == 1000 and first["total_rows"] == 1000
    assert [c["data_type"] for c in first["columns"]] == [
        "integer",
        "text",
        "jsonb",
        "bytea",
        "text[]",
        "numeric",
    ]
    assert "values longer than 500 characters are cut" in first["note"]
    for n, (id_, body, doc, blob, tags, num) in enumerate(rows, start=1):
        assert id_ == n and num == str(10**40 + n)  # numbers are never cut
        assert body == chr(97 + n % 26) * 500 + "...[cut: 2000 chars]"
        assert doc.endswith("...[cut: 2009 chars]") and doc.startswith('{"k": "jjj')
        assert blob.endswith("...[cut: 2000 bytes]")
        assert tags.endswith("...[cut: 2004 chars]")
    for a in answers:
        assert len(json.dumps(a, separators=(",", ":")).encode()) <= BUDGET


async def test_full_values_names_the_columns_never_cut(pdsn: str) -> None:
    async with one_connection(pdsn) as client:
        out = await call(
            client,
            "execute_query",
            sql="SELECT id, body, doc FROM wide ORDER BY id",
            limit=3,
            full_values=["body"],
        )
        body = await call_error(
            client, "execute_query", sql="SELECT id, body FROM wide", full_values=["bdy"]
        )
    assert [r[1] for r in out["rows"]] == [chr(97 + n % 26) * 2000 for n in (1, 2, 3)]
    assert all(r[2].endswith("...[cut: 2009 chars]") for r in out["rows"])
    assert body["error"]["code"] == "PARAMETER_ERROR" and "'body'" in body["error"]["suggestion"]


async def test_a_result_that_fits_one_answer_holds_nothing(pdsn: str) -> None:
    async with one_connection(pdsn) as client:
        out = await call(client, "execute_query", sql="SELECT id FROM big ORDER BY id", limit=100)
        assert out["row_count"] == 100 and out["has_more"] is True
        assert "next_cursor" not in out and "total_rows" not in out


async def test_an_evicted_result_answers_result_expired(pdsn: str) -> None:
    sql = "SELECT id, label FROM big ORDER BY id"
    async with one_connection(pdsn, max_rows=20000, result_store_count=1) as client:
        first = await call(client, "execute_query", sql=sql, limit=20000)
        await call(client, "execute_query", sql=sql + " DESC", limit=20000)  # evicts the first
        body = await call_error(client, "execute_query", cursor=first["next_cursor"])
        assert body["error"]["code"] == "RESULT_EXPIRED"
        assert "again" in body["error"]["suggestion"]


async def test_sql_and_cursor_are_one_or_the_other(pdsn: str) -> None:
    async with one_connection(pdsn) as client:
        both = await call_error(client, "execute_query", sql="SELECT 1", cursor="abc.2")
        neither = await call_error(client, "execute_query")
        bad = await call_error(client, "execute_query", cursor="not a cursor")
        unknown = await call_error(client, "execute_query", cursor="abcdefgh.2")
    assert both["error"]["code"] == neither["error"]["code"] == "PARAMETER_ERROR"
    assert "cursor" in both["error"]["suggestion"] and "sql" in neither["error"]["suggestion"]
    assert bad["error"]["code"] == "PARAMETER_ERROR"
    assert unknown["error"]["code"] == "RESULT_EXPIRED"


async def test_the_memory_store_expires_evicts_and_binds_to_its_owner() -> None:
    now = [0.0]
    store = MemoryResultStore(Limits(max_bytes=100, max_results=2, idle_seconds=10), lambda: now[0])
    a = await store.put("alice", [b"a" * 30, b"b" * 30])
    assert await store.page("alice", a, 1) == (b"b" * 30, 2)
    for owner, index in (("bob", 0), ("alice", 2)):
        try:
            await store.page(owner, a, index)
            raise AssertionError("a page was read that is not held for this caller")
        except ResultExpiredError:
            pass
    b = await store.put("alice", [b"c" * 30])
    c = await store.put("alice", [b"d" * 30])  # over the count: the least recently read goes
    assert len(store) == 2 and store.bytes == 60
    await _expired(store, "alice", a)
    now[0] = 9.0
    await store.page("alice", b, 0)  # renews b
    now[0] = 15.0
    await store.page("alice", b, 0)
    await _expired(store, "alice", c)  # idle for 15 s
    await store.put("alice", [b"e" * 71])  # over the bytes: b goes
    await _expired(store, "alice", b)
    assert store.bytes == 71
    try:
        await store.put("alice", [b"f" * 101])
        raise AssertionError("a result over the store's bytes was held")
    except ValueError:
        pass
    assert len(a) >= 24  # 144 random bits


async def _expired(store: MemoryResultStore, owner: str, result_id: str) -> None:
    try:
        await store.page(owner, result_id, 0)
    except ResultExpiredError:
        return
    raise AssertionError(f"{result_id} is still held")


async def test_recent_queries_lists_what_ran_newest_first(pdsn: str) -> None:
    async with one_connection(pdsn, max_rows=20000) as client:
        await call(client, "execute_query", sql="SELECT id FROM big ORDER BY id", limit=20000)
        await call(client, "execute_query", sql="SELECT 1 AS one")
        await call_error(client, "execute_query", sql="SELECT nosuch FROM big")
        first = await call(client, "execute_query", sql="SELECT id FROM big ORDER BY id", limit=9)
        read = await client.read_resource("pg://queries/recent")
    queries = json.loads(read.contents[0].text)["queries"]  # type: ignore[union-attr]
    assert [q["sql"] for q in queries] == [
        "SELECT id FROM big ORDER BY id",
        "SELECT nosuch FROM big",
        "SELECT 1 AS one",
        "SELECT id FROM big ORDER BY id",
    ]
    newest, failed, one, paged = queries
    assert newest["query_hash"] == first["query_hash"] == paged["query_hash"]
    assert newest["row_count"] == 9 and newest["has_more"] is True
    assert paged["row_count"] == 20000 and paged["has_more"] is False
    assert one["row_count"] == 1 and one["execution_time_ms"] >= 0
    assert failed["error"] == "COLUMN_NOT_FOUND" and "row_count" not in failed
    assert all(q["at"].endswith("+00:00") for q in queries)

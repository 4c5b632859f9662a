"""Paging that survives scale-out (issue 22): two HTTP server processes, one PostgreSQL.

With `MCP_RESULT_STORE` naming one redis-server, a result made by execute_query on one replica
is paged to the end on the other, every row once and in order, and only for the caller's own
token. With the in-process store, the page asked of the other replica answers RESULT_EXPIRED
with the fix (run the query again), never rows.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx2 as httpx
import psutil
import pytest_asyncio
import redisbed
from eventually import wait_for
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcpclient import call, call_error, execute, records
from redisbed import free_port
from serverproc import clean_env, http_answers

EXECUTABLE = str(Path(sys.executable).parent / "pg-mcp-server")
TOKENS = ("token-of-alice-5d1e", "token-of-bob-9c2f")
ROWS = 3000
SQL = "SELECT id, label FROM wide ORDER BY id"
# 3,000 rows of ~120 bytes of JSON each: several pages of the 80,000-byte answer budget.
SETUP = f"""
CREATE TABLE wide (id int PRIMARY KEY, label text NOT NULL);
INSERT INTO wide SELECT g, 'row ' || g || ' ' || repeat('y', 100) FROM generate_series(1, {ROWS}) g;
ANALYZE wide;
"""


@pytest_asyncio.fixture(loop_scope="session")
async def dsn(scratch_dsn: str) -> str:
    """A database of this test's own holding `wide` (one test empties it)."""
    await execute(scratch_dsn, SETUP)
    return scratch_dsn


@dataclass
class Replica:
    mcp: str
    proc: subprocess.Popen[bytes]


@contextmanager
def replica(dsn: str, store: str, log: Path, *args: str) -> Iterator[Replica]:
    """One server process over HTTP with the given result store."""
    port = free_port()
    env = clean_env(MCP_RESULT_STORE=store, MCP_AUTH_TOKENS=",".join(TOKENS))
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            [EXECUTABLE, "--transport", "http", "--port", str(port), "--dsn", dsn, *args],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            assert wait_for(lambda: http_answers(proc, base), 60), log.read_text()[-3000:]
            yield Replica(base + "/mcp", proc)
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(15)


@contextmanager
def two_replicas(dsn: str, store: str, logs: Path) -> Iterator[tuple[str, str]]:
    with ExitStack() as stack:
        first = stack.enter_context(replica(dsn, store, logs / "first.log"))
        second = stack.enter_context(replica(dsn, store, logs / "second.log"))
        yield first.mcp, second.mcp


@asynccontextmanager
async def client(url: str, token: str) -> AsyncIterator[Client]:
    async with (
        httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
        Client(streamable_http_client(url, http_client=http)) as session,
    ):
        yield session


async def test_the_store_password_reaches_no_worker_and_no_log(
    dsn: str, redis_url: str, tmp_path: Path
) -> None:
    """MCP_RESULT_STORE may hold a password: like PG_DSN, it is not in the workers'
    environment (they get the settings as an argument) and not in what the server logs."""
    password = urlsplit(redis_url).password
    assert password
    log = tmp_path / "server.log"
    with replica(dsn, redis_url, log, "--workers", "2", "--log-level", "DEBUG") as running:
        workers: list[psutil.Process] = []

        def two() -> bool:
            nonlocal workers
            children = psutil.Process(running.proc.pid).children()
            workers = [c for c in children if "spawn_main" in " ".join(c.cmdline())]
            return len(workers) >= 2

        assert wait_for(two, 30), "two workers"
        async with client(running.mcp, TOKENS[0]) as alice:
            await call(alice, "list_schemas")
        for worker in workers:  # (the server's own /proc environ is what it was started with)
            assert password.encode() not in Path(f"/proc/{worker.pid}/environ").read_bytes()
    assert password not in log.read_text(errors="replace")


async def test_a_result_made_on_one_replica_is_paged_on_the_other(
    dsn: str, redis_url: str, tmp_path: Path
) -> None:
    shared = redis_url.rsplit("/", 1)[0] + "/1"  # a database of its own on the session's Redis
    with two_replicas(dsn, shared, tmp_path) as (first, second):
        async with client(first, TOKENS[0]) as alice:
            answer = await call(alice, "execute_query", sql=SQL, limit=ROWS)
        cursor = answer["next_cursor"]
        assert cursor, "the result must need several pages"
        rows = records(answer)
        # The other replica must not run the query again: it would find no rows now.
        await execute(dsn, "DELETE FROM wide")
        async with client(second, TOKENS[1]) as bob:
            # Another token, on the replica that can read it: the same answer as an unknown id.
            refused = await call_error(bob, "execute_query", cursor=cursor)
        assert refused["error"]["code"] == "RESULT_EXPIRED"
        assert "rows" not in refused
        answers = 1
        async with client(second, TOKENS[0]) as alice:
            while cursor:
                answer = await call(alice, "execute_query", cursor=cursor)
                rows += records(answer)
                cursor = answer.get("next_cursor")
                answers += 1
        assert answers >= 3
        # Every row once, in order, as the first replica read it.
        assert rows == [{"id": i, "label": f"row {i} " + "y" * 100} for i in range(1, ROWS + 1)]


async def test_with_the_memory_store_the_other_replica_says_expired(
    dsn: str, tmp_path: Path
) -> None:
    with two_replicas(dsn, "memory", tmp_path) as (first, second):
        async with client(first, TOKENS[0]) as alice:
            answer = await call(alice, "execute_query", sql=SQL, limit=ROWS)
            cursor = answer["next_cursor"]
            assert cursor
            # The cursor is good where the result is held...
            held = await call(alice, "execute_query", cursor=cursor)
            assert records(held)[0]["id"] == len(records(answer)) + 1
        async with client(second, TOKENS[0]) as alice:
            # ...and expired, with the fix, on the replica that does not hold it.
            body = await call_error(alice, "execute_query", cursor=cursor)
        assert body["error"]["code"] == "RESULT_EXPIRED"
        assert "run the query again" in body["error"]["suggestion"].lower()
        assert "rows" not in body


def test_a_store_that_does_not_answer_stops_the_start(dsn: str) -> None:
    port = free_port()  # nothing listens there
    store = f"redis://:pw-never-shown@127.0.0.1:{port}/3"
    started = subprocess.run(
        [EXECUTABLE, "--transport", "http", "--port", str(free_port()), "--dsn", dsn],
        env=clean_env(MCP_RESULT_STORE=store),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
    )
    said = started.stderr.decode(errors="replace")
    assert started.returncode == 2, said
    where = f"redis://127.0.0.1:{port}/3"
    assert f"cannot use the result store at {where}: it cannot be reached" in said
    assert "pw-never-shown" not in said + started.stdout.decode(errors="replace")


async def test_a_page_asked_while_the_store_is_down_says_why(dsn: str, tmp_path: Path) -> None:
    store = redisbed.start_redis(password="pw-" + secrets.token_hex(8))
    try:
        with replica(dsn, store.url(), tmp_path / "server.log") as running:
            async with client(running.mcp, TOKENS[0]) as alice:
                answer = await call(alice, "execute_query", sql=SQL, limit=ROWS)
                assert answer["next_cursor"]
                store.stop()
                body = await call_error(alice, "execute_query", cursor=answer["next_cursor"])
            log = (tmp_path / "server.log").read_text(errors="replace")
    finally:
        store.stop()
    assert body["error"]["code"] == "RESULT_EXPIRED"
    assert "result store (Redis) failed: it cannot be reached" in body["error"]["suggestion"]
    assert "rows" not in body
    assert store.password
    assert store.password not in json.dumps(body) + log
    assert f"result store redis://127.0.0.1:{store.port}/0 failed" in log


async def test_a_query_run_while_the_store_is_down_is_answered_without_paging(
    dsn: str, tmp_path: Path
) -> None:
    store = redisbed.start_redis()
    try:
        with replica(dsn, store.url(), tmp_path / "server.log") as running:
            store.stop()
            async with client(running.mcp, TOKENS[0]) as alice:
                answer = await call(alice, "execute_query", sql=SQL, limit=ROWS)
    finally:
        store.stop()
    assert records(answer)[0] == {"id": 1, "label": "row 1 " + "y" * 100}
    assert answer["has_more"] is True
    assert "next_cursor" not in answer
    assert "paging is unavailable" in answer["note"]
    assert "cannot be reached" in answer["note"]

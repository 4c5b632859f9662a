"""The result byte cap bounds the server's memory (issue 15 item 2).

The real server runs as a process over stdio; its peak resident set (VmHWM, which counts what
asyncpg holds in C as well as Python objects) is reset before each call (clear_refs) and read
after it. Peak above the resident set before the call must stay within 16x MCP_MAX_RESULT_BYTES
for 200 rows of 1 MB (200 MB of results), a single 50 MB value and wide sample rows.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psutil
from mcp import Client, StdioServerParameters
from mcpclient import call, execute
from serverproc import clean_env

CAP = 1_000_000
EXECUTABLE = str(Path(sys.executable).parent / "pg-mcp-server")

WIDE = """
CREATE TABLE wide (id int PRIMARY KEY, body text, doc jsonb, blob bytea);
INSERT INTO wide SELECT g, repeat('x', 1000000), jsonb_build_object('k', repeat('y', 1000000)),
       convert_to(repeat('z', 1000000), 'UTF8')
FROM generate_series(1, 100) g;
"""


def _server(client_pid: int) -> psutil.Process:
    for child in psutil.Process(client_pid).children(recursive=True):
        if any("pg-mcp-server" in part for part in child.cmdline()):
            return child
    raise AssertionError("the server process was not found")


def _status(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(key)


async def _peak(client: Client, pid: int, tool: str, **arguments: Any) -> int:
    """The server's peak resident set during this call."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets VmHWM to the current VmRSS
    await call(client, tool, **arguments)
    return _status(pid, "VmHWM")


@asynccontextmanager
async def server(dsn: str) -> AsyncIterator[tuple[Client, int]]:
    env = clean_env()
    env["MCP_MAX_RESULT_BYTES"] = str(CAP)
    params = StdioServerParameters(command=EXECUTABLE, args=["--dsn", dsn], env=env)
    async with Client(params) as client:
        yield client, _server(os.getpid()).pid


# execute_query's values whole (full_values): what is measured is the byte cap.
CALLS: list[tuple[str, dict[str, Any]]] = [
    (
        "execute_query",
        {
            "sql": "SELECT repeat('x', 1000000) FROM generate_series(1, 200)",
            "full_values": ["repeat"],
        },
    ),
    (
        "execute_query",
        {
            "sql": "SELECT repeat('x', 300000) FROM generate_series(1, 200)",
            "full_values": ["repeat"],
        },
    ),
    (
        "execute_query",
        {"sql": "SELECT repeat('x', 50000000) AS one_value", "full_values": ["one_value"]},
    ),
    (
        "execute_query",
        {"sql": "SELECT * FROM wide ORDER BY id", "full_values": ["body", "doc", "blob"]},
    ),
    ("execute_query", {"sql": "SELECT w FROM wide w", "limit": 10000, "full_values": ["w"]}),
    ("get_sample_rows", {"table_name": "wide", "limit": 100}),
]


# The same paths on small data, to warm the server up (imports, pool, caches) before idle.
WARM_UP: list[tuple[str, dict[str, Any]]] = [
    ("execute_query", {"sql": "SELECT repeat('x', 10) FROM generate_series(1, 2)"}),
    ("execute_query", {"sql": "SELECT * FROM wide WHERE id < 0"}),
    ("execute_query", {"sql": "SELECT w FROM wide w WHERE id < 0"}),
    ("get_sample_rows", {"table_name": "wide", "limit": 1, "columns": ["id"]}),
]


async def test_peak_memory_of_a_call_stays_within_16x_the_cap(scratch_dsn: str) -> None:
    """Each call's peak is measured against the idle resident set after a warm-up on small
    data, not against the set before the call: memory kept from an earlier call counts."""
    await execute(scratch_dsn, WIDE)
    async with server(scratch_dsn) as (client, pid):
        for tool, arguments in WARM_UP:
            await call(client, tool, **arguments)
        idle = _status(pid, "VmRSS")
        peaks = {f"{t} {a}": await _peak(client, pid, t, **a) - idle for t, a in CALLS}
    over = {call: f"{peak / 1e6:.1f} MB" for call, peak in peaks.items() if peak > 16 * CAP}
    assert not over, over


async def test_the_capped_answer_says_so(scratch_dsn: str) -> None:
    async with server(scratch_dsn) as (client, _):
        sql = "SELECT repeat('x', 1000000) FROM generate_series(1, 200)"
        out = await call(client, "execute_query", sql=sql, full_values=["repeat"])
        assert out["row_count"] == 0 and out["has_more"] is True  # one row alone is over
        assert out["note"].startswith(f"the first row alone is over the {CAP}-byte result limit")
        sql = "SELECT repeat('x', 300000) FROM generate_series(1, 200)"
        out = await call(client, "execute_query", sql=sql, full_values=["repeat"])
        # Three rows held, a page each (a row over the answer budget is a page of its own).
        assert out["total_rows"] == 3 and out["row_count"] == 1 and out["has_more"] is True
        assert f"cut after 3 rows at the {CAP}-byte result limit" in out["note"]


COMMENT_MB = 50
# Comments a role may write on its own objects (attack4 F-C: a 200 MB schema comment made
# list_schemas peak at 900 MB): each listing cuts them in PostgreSQL.
UNCOMMENTED = """
CREATE SCHEMA noted;
CREATE TABLE noted.note (id int PRIMARY KEY, body text);
"""
COMMENTED = f"""DO $$BEGIN
    EXECUTE format('COMMENT ON SCHEMA noted IS %L', repeat('s', {COMMENT_MB} * 1000000));
    EXECUTE format('COMMENT ON TABLE noted.note IS %L', repeat('t', {COMMENT_MB} * 1000000));
    EXECUTE format('COMMENT ON COLUMN noted.note.body IS %L', repeat('c', {COMMENT_MB} * 1000000));
    EXECUTE format('COMMENT ON INDEX noted.note_pkey IS %L', repeat('i', {COMMENT_MB} * 1000000));
END$$"""
COMMENT_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("list_schemas", {}),
    ("list_tables", {"schema_name": "noted"}),
    ("list_tables", {"schema_name": "noted", "include_columns": True}),
    ("search_tables", {"query": "note"}),
    ("describe_table", {"table_name": "note", "schema_name": "noted"}),
]


async def test_big_comments_are_cut_before_the_server_reads_them(scratch_dsn: str) -> None:
    """Warmed up on the same calls before the comments are made; measured, then each answer
    holds the comment's start and the cut mark with its whole length."""
    await execute(scratch_dsn, UNCOMMENTED)
    async with server(scratch_dsn) as (client, pid):
        for tool, arguments in COMMENT_CALLS:
            await call(client, tool, **arguments)
        await execute(scratch_dsn, COMMENTED)
        idle = _status(pid, "VmRSS")
        peaks = {f"{t} {a}": await _peak(client, pid, t, **a) - idle for t, a in COMMENT_CALLS}
        over = {call: f"{peak / 1e6:.1f} MB" for call, peak in peaks.items() if peak > 4 * CAP}
        assert not over, over
        mark = f"...[cut: {COMMENT_MB * 1000000} chars]"
        schemas = (await call(client, "list_schemas"))["schemas"]
        noted = next(s for s in schemas if s["name"] == "noted")
        assert noted["description"] == "s" * 500 + mark
        tables = await call(client, "list_tables", schema_name="noted", include_columns=True)
        assert tables["tables"][0]["description"] == "t" * 500 + mark
        described = await call(client, "describe_table", table_name="note", schema_name="noted")
        assert described["description"] == "t" * 500 + mark
        body = next(c for c in described["columns"] if c["name"] == "body")
        assert body["description"] == "c" * 500 + mark
        assert described["indexes"][0]["description"] == "i" * 500 + mark
        found = await call(client, "search_tables", query="note")
        assert found["matches"][0]["description"] == "t" * 200 + mark

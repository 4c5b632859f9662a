"""execute_query("SELECT * FROM big_table", limit=10000) on 1,000,000 and 10,000,000 rows.

Issue 4's target: a 10,000-row result comes back in one call without the server reading the
rest of a 1,000,000-row table. Starts a throwaway PostgreSQL 18 (pg_stat_statements preloaded)
and fills two tables with the same 8 columns of mixed types (bigint, integer, text,
numeric(12,2), double precision, timestamptz, boolean, uuid): `big_1m` with 1,000,000 rows and
`big_10m` with 10,000,000, then VACUUM (FREEZE, ANALYZE)s them. If the server stopped after
limit + 1 rows, the call takes the same time on both.

For each table and each result-size cap (the default MCP_MAX_RESULT_BYTES, 1,000,000 bytes of
row JSON, and RAISED_MAX_BYTES, which lets all 10,000 rows through):
  - in-process (`mcp.Client(server)`, client output validation off): WARMUP then RUNS calls,
    median / p95, with stopwatches on the tool function and run_query (guard, prepare, cursor
    fetch, rows to JSON); for comparison the same fetch with plain asyncpg (prepare + cursor
    fetch of limit + 1 rows in a read-only transaction);
  - over stdio (bench/stdio_server.py --max-result-bytes), with and without the client's
    jsonschema output check: WARMUP then RUNS calls, median / p95; the result's size (the text
    content, and structuredContent as compact JSON: the message carries both) and the server
    process's resident set size (VmRSS / VmHWM, read by its bench_memory tool) before and
    after.
What PostgreSQL read is shown three ways for one call on each table: pg_stat_statements (rows
and shared blocks of the statement), pg_stat_user_tables / pg_statio_user_tables (tuples and
heap blocks read; these are flushed by the server's backend within ~1 s to 10 s of going idle,
so the script polls for up to STATS_WAIT_S), against the table's size in blocks; and a full
read of the table (EXPLAIN ANALYZE of the same SELECT) is timed to show what the rest would
cost.

Run: uv run python bench/bench_query.py   (~4 min, most of it filling big_10m)
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
from benchlib import Stopwatch, create_database, embedded_server, ms_since, patched, summary
from mcp import Client, StdioServerParameters
from mcp.client.session import ClientSession
from mcp.client.stdio import stdio_client
from mcp_types import CallToolResult

from pg_mcp_server.config import ServerSettings, Settings
from pg_mcp_server.server import build_server
from pg_mcp_server.tools import query_tools

WARMUP = 2
RUNS = 20
LIMIT = 10_000
RAISED_MAX_BYTES = 64 * 1024 * 1024
STATS_WAIT_S = 15.0
TABLES = {"big_1m": 1_000_000, "big_10m": 10_000_000}
SETTINGS = {"shared_preload_libraries": "pg_stat_statements"}
ROOT = Path(__file__).resolve().parents[1]

CREATE = """
CREATE TABLE {name} (
    id bigint PRIMARY KEY,
    customer_id integer NOT NULL,
    status text NOT NULL,
    amount numeric(12,2) NOT NULL,
    score double precision,
    created_at timestamptz NOT NULL,
    is_active boolean NOT NULL,
    code uuid NOT NULL
) WITH (autovacuum_enabled = off);
INSERT INTO {name}
SELECT g,
       ((g * 7919) % 100000)::int,
       (ARRAY['new', 'paid', 'shipped', 'delivered', 'returned'])[1 + g % 5],
       round(((g * 37) % 1000000) / 100.0, 2),
       CASE WHEN g % 10 = 0 THEN NULL ELSE ((g * 7) % 1000) / 997.0 END,
       timestamptz '2024-01-01 00:00:00+00' + g * interval '7 seconds',
       g % 3 <> 0,
       md5(g::text)::uuid
FROM generate_series(1::bigint, {rows}) AS g;
"""


def sql_for(table: str) -> str:
    return f"SELECT * FROM {table}"


def arguments(table: str) -> dict[str, Any]:
    return {"sql": sql_for(table), "limit": LIMIT}


async def timed_calls(once: Callable[[], Awaitable[Any]]) -> list[float]:
    """WARMUP untimed calls, then RUNS timed ones (ms)."""
    for _ in range(WARMUP):
        await once()
    samples = []
    for _ in range(RUNS):
        start = time.perf_counter_ns()
        await once()
        samples.append(ms_since(start))
    return samples


async def fill(dsn: str) -> list[str]:
    lines = []
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("CREATE EXTENSION pg_stat_statements")
        for name, rows in TABLES.items():
            start = time.perf_counter()
            await conn.execute(CREATE.format(name=name, rows=rows), timeout=1800)
            filled = time.perf_counter() - start
            start = time.perf_counter()
            await conn.execute(f"VACUUM (FREEZE, ANALYZE) {name}", timeout=1800)
            vacuumed = time.perf_counter() - start
            pages, size = await conn.fetchrow(
                "SELECT relpages, pg_size_pretty(pg_table_size(oid)) FROM pg_class"
                " WHERE oid = $1::regclass",
                name,
            )
            lines.append(
                f"{name}: {rows:,} rows, {pages:,} heap blocks ({size}); filled in "
                f"{filled:.0f} s, VACUUM (FREEZE, ANALYZE) {vacuumed:.0f} s"
            )
            print(lines[-1], flush=True)
    finally:
        await conn.close()
    return lines


# --- client-side validation -----------------------------------------------------------------


async def _no_validation(self: ClientSession, name: str, result: CallToolResult) -> None:
    return None


_VALIDATE = ClientSession.validate_tool_result


@contextmanager
def client_validation(on: bool) -> Iterator[None]:
    with patched(
        ClientSession, "validate_tool_result", lambda _: _VALIDATE if on else _no_validation
    ):
        yield


# --- the tool -------------------------------------------------------------------------------


async def call(client: Client, table: str) -> CallToolResult:
    result = await client.call_tool("execute_query", arguments(table))
    if result.is_error:
        raise RuntimeError(f"execute_query failed: {result.content}")
    return result


@dataclass
class Shape:
    rows: int
    has_more: bool
    text_bytes: int
    structured_bytes: int
    note: str | None

    @classmethod
    def of(cls, result: CallToolResult) -> Shape:
        body = result.structured_content or {}
        text = result.content[0].text if result.content[0].type == "text" else ""
        return cls(
            rows=body["row_count"],
            has_more=body["has_more"],
            text_bytes=len(text.encode()),
            structured_bytes=len(json.dumps(body, separators=(",", ":")).encode()),
            note=body.get("note"),
        )


def cap_label(max_bytes: int | None) -> str:
    if max_bytes is None:
        default = ServerSettings.model_fields["max_result_bytes"].default
        return f"default cap ({default:,} B)"
    return f"cap {max_bytes:,} B"


async def in_process(dsn: str, table: str, max_bytes: int | None) -> list[str]:
    settings = Settings.load(database={"dsn": dsn}, server={"max_result_bytes": max_bytes})
    server = build_server(settings)
    tool = server._tool_manager.get_tool("execute_query")  # private; bench only
    assert tool is not None
    in_tool, in_run = Stopwatch(), Stopwatch()
    tool.fn = in_tool.wrap(tool.fn)
    with client_validation(False), patched(query_tools, "run_query", in_run.wrap):
        async with Client(server) as client:
            shape = Shape.of(await call(client, table))
            samples = await timed_calls(lambda: call(client, table))
    median, p95 = summary(samples)
    return [
        f"| in-process | {table} | {cap_label(max_bytes)} | {shape.rows:,} | {shape.has_more} "
        f"| {median:.0f} / {p95:.0f} | {in_tool.median(RUNS):.0f} | {in_run.median(RUNS):.0f} "
        f"| {shape.text_bytes:,} / {shape.structured_bytes:,} |",
        f"  note: {shape.note}" if shape.note else "",
    ]


async def driver_fetch(dsn: str, table: str) -> str:
    """asyncpg alone: prepare + cursor fetch of LIMIT + 1 rows, in a read-only transaction."""
    conn = await asyncpg.connect(dsn)
    samples = []
    try:
        for i in range(WARMUP + RUNS):
            async with conn.transaction(readonly=True):
                start = time.perf_counter_ns()
                stmt = await conn.prepare(sql_for(table))
                rows = await (await stmt.cursor()).fetch(LIMIT + 1)
                if i >= WARMUP:
                    samples.append(ms_since(start))
            assert len(rows) == LIMIT + 1
    finally:
        await conn.close()
    median, p95 = summary(samples)
    what = f"asyncpg alone: prepare + cursor fetch({LIMIT + 1})"
    return f"| {what} | {table} | {median:.1f} / {p95:.1f} |"


def server_params(dsn: str, max_bytes: int | None) -> StdioServerParameters:
    args = [str(Path(__file__).with_name("stdio_server.py")), "--dsn", dsn]
    if max_bytes is not None:
        args += ["--max-result-bytes", str(max_bytes)]
    return StdioServerParameters(command=sys.executable, args=args, cwd=ROOT)


async def memory(client: Client) -> dict[str, int]:
    result = await client.call_tool("bench_memory", {})
    body = result.structured_content or {}
    return dict(body.get("result", body))


async def over_stdio(dsn: str, max_bytes: int | None, tmp: Path) -> list[str]:
    lines = []
    with (tmp / "server-stderr.log").open("a") as errlog:
        async with Client(stdio_client(server_params(dsn, max_bytes), errlog=errlog)) as client:
            await client.call_tool("execute_query", {"sql": "SELECT 1"})
            before = await memory(client)
            for table in TABLES:
                shape = Shape.of(await call(client, table))
                for validate in (True, False):
                    with client_validation(validate):
                        samples = await timed_calls(functools.partial(call, client, table))
                    median, p95 = summary(samples)
                    check = "client validates" if validate else "validation off"
                    lines.append(
                        f"| stdio, {check} | {table} | {cap_label(max_bytes)} | {shape.rows:,} "
                        f"| {shape.has_more} | {median:.0f} / {p95:.0f} | | "
                        f"| {shape.text_bytes:,} / {shape.structured_bytes:,} |"
                    )
            after = await memory(client)
    lines.append(
        f"  server process ({cap_label(max_bytes)}): VmRSS {before['VmRSS'] / 1024:.0f} MB and "
        f"peak VmHWM {before['VmHWM'] / 1024:.0f} MB after start-up and SELECT 1; after the big "
        f"calls VmRSS {after['VmRSS'] / 1024:.0f} MB, peak VmHWM {after['VmHWM'] / 1024:.0f} MB"
    )
    return lines


# --- what PostgreSQL read -------------------------------------------------------------------

READ_STATS = """
SELECT coalesce(s.seq_tup_read, 0) AS tuples, coalesce(s.seq_scan, 0) AS scans,
       coalesce(io.heap_blks_read, 0) + coalesce(io.heap_blks_hit, 0) AS blocks
FROM pg_stat_user_tables s JOIN pg_statio_user_tables io USING (relid)
WHERE s.relname = $1
"""


async def table_stats(admin: asyncpg.Connection, table: str) -> asyncpg.Record:
    await admin.execute("SELECT pg_stat_clear_snapshot()")
    row = await admin.fetchrow(READ_STATS, table)
    assert row is not None
    return row


async def what_was_read(dsn: str, table: str) -> list[str]:
    """One tool call; then pg_stat_statements and the table's read counters."""
    admin = await asyncpg.connect(dsn)
    try:
        pages = await admin.fetchval("SELECT relpages FROM pg_class WHERE relname = $1", table)
        async with Client(build_server(Settings.load(database={"dsn": dsn}))) as client:
            await client.call_tool("execute_query", {"sql": "SELECT 1"})  # connect, guard
            await asyncio.sleep(0.2)
            await admin.execute("SELECT pg_stat_statements_reset()")
            before = await table_stats(admin, table)
            with client_validation(False):
                await call(client, table)
            deadline = time.monotonic() + STATS_WAIT_S
            after = await table_stats(admin, table)
            while after["scans"] == before["scans"] and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
                after = await table_stats(admin, table)
        pgss = await admin.fetchrow(
            "SELECT calls, rows, shared_blks_hit + shared_blks_read AS blocks"
            " FROM pg_stat_statements WHERE query ILIKE $1",
            f"%FROM {table}%",
        )
        plan = await admin.fetch(
            f"EXPLAIN (ANALYZE, TIMING OFF, BUFFERS) {sql_for(table)}", timeout=600
        )
    finally:
        await admin.close()
    full = next(r[0] for r in plan if r[0].startswith("Execution Time"))
    scanned = next(r[0].strip() for r in plan if "Seq Scan" in r[0])
    lines = [f"- {table} ({pages:,} heap blocks):"]
    if pgss is None:
        lines.append("  - pg_stat_statements: the statement was not recorded")
    else:
        lines.append(
            f"  - pg_stat_statements: calls {pgss['calls']}, rows {pgss['rows']:,}, "
            f"shared blocks hit + read {pgss['blocks']:,}"
        )
    if after["scans"] == before["scans"]:
        lines.append(f"  - table counters: not flushed within {STATS_WAIT_S:g} s")
    else:
        lines.append(
            f"  - table counters: {after['scans'] - before['scans']} sequential scan(s), "
            f"{after['tuples'] - before['tuples']:,} tuples read, "
            f"{after['blocks'] - before['blocks']:,} heap blocks"
        )
    lines.append(f"  - reading it all (EXPLAIN ANALYZE, TIMING OFF): {scanned}; {full}")
    return lines


# --- driver ----------------------------------------------------------------------------------


async def bench(dsn: str, tmp: Path) -> None:
    await fill(dsn)
    load_before = os.getloadavg()[0]
    rows: list[str] = []
    drivers: list[str] = []
    for table in TABLES:
        for max_bytes in (None, RAISED_MAX_BYTES):
            rows += await in_process(dsn, table, max_bytes)
        drivers.append(await driver_fetch(dsn, table))
    for max_bytes in (None, RAISED_MAX_BYTES):
        rows += await over_stdio(dsn, max_bytes, tmp)
    read: list[str] = []
    for table in TABLES:
        read += await what_was_read(dsn, table)
    load_after = os.getloadavg()[0]
    print(f"\nexecute_query(sql='SELECT * FROM <table>', limit={LIMIT}); {WARMUP} warm-up then")
    print(f"{RUNS} timed calls per row. 1-minute load average {load_before:.2f} before, ")
    print(f"{load_after:.2f} after.\n")
    print("| where | table | result cap | rows returned | has_more | median / p95 (ms) "
          "| tool function (ms) | run_query (ms) | text / structuredContent (bytes) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(line for line in rows if line.startswith("|")))
    print()
    print("\n".join(line.strip() for line in rows if line.startswith("  ")))
    print("\n| what | table | median / p95 (ms) |\n|---|---|---|")
    print("\n".join(drivers))
    print("\nWhat PostgreSQL read for one call:\n")
    print("\n".join(read))


def main() -> None:
    with embedded_server(SETTINGS) as pg, tempfile.TemporaryDirectory() as tmp:
        dsn = asyncio.run(create_database(pg, "bigdata"))
        asyncio.run(bench(dsn, Path(tmp)))


if __name__ == "__main__":
    main()

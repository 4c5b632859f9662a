"""execute_query("SELECT * FROM big_…", limit=10000) on 1,000,000 and 10,000,000 rows.

Fills two tables with the same 8 columns of mixed types on a throwaway PostgreSQL 18, then runs
each case in a fresh Python process (`--child`), so that the kernel's peak resident set size of
that process (VmHWM) is the case's own: the server in process through
`mcp.Client(build_server(settings))`, client and server together, default settings. The child
times the first call, WARMUP untimed and RUNS timed calls (median / p95) without the client's
output-schema check (common.call_tool), then RUNS // 3 with it (`Client.call_tool`). Then the
table's sequential-scan counters (flushed when the child's backends exit) show how many rows
PostgreSQL read per call: limit + 1 if the server stops early.

Run: uv run python bench/bench_query.py   (~5 min, most of it filling big_10m)
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import asyncpg
from common import SUPERUSER_OK, call_tool, header, summary, timed, vmhwm_mib
from mcp import Client
from mcp_types import CallToolResult

from pg_mcp_server.config import Settings
from pg_mcp_server.embedded import EmbeddedPostgres
from pg_mcp_server.server import build_server

WARMUP = 2
RUNS = 15
LIMIT = 10_000
TABLES = {"big_1m": 1_000_000, "big_10m": 10_000_000}
FILL = """
CREATE TABLE {name} (
    id bigint PRIMARY KEY, customer_id integer NOT NULL, status text NOT NULL,
    amount numeric(12,2) NOT NULL, score double precision, created_at timestamptz NOT NULL,
    is_active boolean NOT NULL, code uuid NOT NULL
) WITH (autovacuum_enabled = off);
INSERT INTO {name}
SELECT g, ((g * 7919) % 100000)::int,
       (ARRAY['new', 'paid', 'shipped', 'delivered', 'returned'])[1 + g % 5],
       round(((g * 37) % 1000000) / 100.0, 2),
       CASE WHEN g % 10 = 0 THEN NULL ELSE ((g * 7) % 1000) / 997.0 END,
       timestamptz '2024-01-01 00:00:00+00' + g * interval '7 seconds', g % 3 <> 0,
       md5(g::text)::uuid
FROM generate_series(1::bigint, {rows}) AS g;
"""
SEQ_TUP_READ = "SELECT seq_tup_read FROM pg_stat_user_tables WHERE relname = $1"


async def child(dsn: str, sql: str) -> None:
    """One case in this fresh process; prints one JSON line."""
    answers: list[CallToolResult] = []  # the last only: kept answers would count in VmHWM
    arguments = {"sql": sql, "limit": LIMIT}
    async with Client(
        build_server(Settings.load(database={"dsn": dsn}, server=SUPERUSER_OK))
    ) as client:

        async def server_side() -> None:
            answers[:] = [await call_tool(client, "execute_query", arguments)]

        async def checked() -> None:
            answers[:] = [await client.call_tool("execute_query", arguments)]

        first, samples = await timed(server_side, warmup=WARMUP, runs=RUNS, budget_s=60)
        _, with_check = await timed(checked, warmup=0, runs=RUNS // 3, budget_s=30)
    last = answers[-1]
    facts = last.structured_content or {}
    text = "".join(getattr(block, "text", "") for block in last.content)
    assert not last.is_error, text[:300]
    calls = 2 + WARMUP + len(samples) + len(with_check)
    print(json.dumps({"first": first, "samples": samples, "checked": with_check, "calls": calls,
                      "rows": facts.get("row_count"), "has_more": facts.get("has_more"),
                      "text_bytes": len(text.encode()), "vmhwm_mib": vmhwm_mib()}))  # fmt: skip


async def reset_counters(dsn: str, table: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("SELECT pg_stat_reset_single_table_counters($1::regclass)", table)
    finally:
        await conn.close()


async def rows_read(dsn: str, table: str) -> int:
    """seq_tup_read since the reset, once the exited child's backends have flushed it."""
    conn = await asyncpg.connect(dsn)
    try:
        last, now, deadline = -1, 0, time.monotonic() + 10
        while time.monotonic() < deadline and not (now == last and now > 0):
            last = now
            await asyncio.sleep(0.5)
            await conn.execute("SELECT pg_stat_clear_snapshot()")
            now = int(await conn.fetchval(SEQ_TUP_READ, table))
        return now
    finally:
        await conn.close()


async def fill(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        for name, rows in TABLES.items():
            start = time.perf_counter()
            await conn.execute(FILL.format(name=name, rows=rows), timeout=1800)
            await conn.execute(f"VACUUM (FREEZE, ANALYZE) {name}", timeout=1800)
            print(f"{name}: {rows:,} rows filled in {time.perf_counter() - start:.0f} s")
    finally:
        await conn.close()


def main() -> None:
    with EmbeddedPostgres() as pg:
        dsn = pg.create_database("rows")
        asyncio.run(fill(dsn))
        print(f"\n{header()}\n")
        print(
            "| query | first call (ms) | median / p95 ms (timed calls) | with the client's "
            "check | rows, has_more | text | rows read per call | peak RSS |\n" + "|---" * 8 + "|"
        )
        for table in ("", *TABLES):
            sql = f"SELECT * FROM {table}" if table else "SELECT 1"
            if table:
                asyncio.run(reset_counters(dsn, table))
            out = subprocess.run([sys.executable, __file__, "--child", dsn, sql],
                                 capture_output=True, text=True, check=True)  # fmt: skip
            r = json.loads(out.stdout.splitlines()[-1])
            read = f"{asyncio.run(rows_read(dsn, table)) / r['calls']:,.0f}" if table else "-"
            print(f"| `{sql}` | {r['first']:.0f} | {summary(r['samples'])} ({len(r['samples'])}) "
                  f"| {summary(r['checked'])} ({len(r['checked'])}) | {r['rows']:,}, "
                  f"{r['has_more']} | {r['text_bytes'] / 1e6:.2f} MB | {read} "
                  f"| {r['vmhwm_mib']:.0f} MiB |", flush=True)  # fmt: skip
        print(f"\n{header()}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        asyncio.run(child(sys.argv[2], sys.argv[3]))
    else:
        main()

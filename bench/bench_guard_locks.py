"""What one guarded call costs: round trips on the wire and milliseconds, per tool call.

The server in process (`mcp.Client(build_server(settings))`, one pooled connection) reaches a
throwaway PostgreSQL 18 through a counting relay (tests/wire.py: a flight is one round trip,
however many protocol messages it holds). For each case, WARMUP untimed calls, then RUNS timed
ones (server side, common.call_tool): the median / p95 ms, and the flights per call, the
background reset after the answer included (it is one). To compare two checkouts, run this
script with `PYTHONPATH=<other checkout>/src` (its server, this script).

Run: uv run python bench/bench_guard_locks.py   (~1 min)
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg
from common import ROOT, call_tool, header, summary
from mcp import Client

import pg_mcp_server
from pg_mcp_server.config import Settings
from pg_mcp_server.embedded import EmbeddedPostgres
from pg_mcp_server.server import build_server

sys.path.insert(0, str(ROOT / "tests"))
from wire import Relay, relay

WARMUP = 20
RUNS = 300
SETUP = """
CREATE TABLE items (id int PRIMARY KEY, label text, price numeric(8, 2));
INSERT INTO items SELECT g, 'item ' || g, g * 1.5 FROM generate_series(1, 1000) g;
CREATE TABLE parts (id int PRIMARY KEY, item_id int REFERENCES items (id));
INSERT INTO parts SELECT g, g FROM generate_series(1, 1000) g;
CREATE VIEW priced AS SELECT i.id, i.label, i.price, p.id AS part FROM items i JOIN parts p
    ON p.item_id = i.id;
CREATE TABLE parted (id int, v text) PARTITION BY RANGE (id);
DO $$ BEGIN
    FOR k IN 0..999 LOOP
        EXECUTE format('CREATE TABLE parted_%s PARTITION OF parted FOR VALUES FROM (%s) TO (%s)',
                       k, k * 10, k * 10 + 10);
    END LOOP;
END $$;
ANALYZE;
"""
PARTITIONS = ", ".join(["public.parted"] + [f"public.parted_{k}" for k in range(1000)])
CASES: list[tuple[str, dict[str, Any]]] = [
    ("execute_query", {"sql": "SELECT 1 AS one"}),
    ("execute_query", {"sql": "SELECT id, label FROM items WHERE id <= 10 ORDER BY id"}),
    ("execute_query", {"sql": "SELECT id, label FROM items WHERE id <= 10", "timeout_ms": 5000}),
    ("execute_query", {"sql": "SELECT * FROM priced WHERE id <= 10"}),
    ("execute_query", {"sql": "SELECT * FROM parted WHERE id = 5"}),
    ("explain_query", {"sql": "SELECT * FROM priced WHERE id <= 10"}),
    ("get_sample_rows", {"table_name": "items"}),
]


async def settled(dsn: str) -> None:
    """Until the pooled session is idle again (its background reset done)."""
    conn = await asyncpg.connect(dsn)
    try:
        for _ in range(500):
            busy = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE application_name = 'pg-mcp-server' AND state <> 'idle'"
            )
            if not busy:
                return
            await asyncio.sleep(0.002)
    finally:
        await conn.close()


async def measure(dsn: str, wire: Relay, database: str) -> None:
    settings = Settings.load(database={"dsn": wire.dsn(database), "pool_size": 1})
    async with Client(build_server(settings)) as client:
        for tool, arguments in CASES:
            for _ in range(WARMUP):
                result = await call_tool(client, tool, arguments)
                assert not result.is_error, result.content
            flights: list[int] = []
            samples: list[float] = []
            for _ in range(RUNS):
                await settled(dsn)
                before = wire.flights
                start = time.perf_counter_ns()
                await call_tool(client, tool, arguments)
                samples.append((time.perf_counter_ns() - start) / 1e6)
                await settled(dsn)
                flights.append(wire.flights - before)
            shown = ", ".join(f"{k}={v}" for k, v in arguments.items())
            print(
                f"| {tool}({shown}) | {min(flights)}-{max(flights)} | {summary(samples)} |",
                flush=True,
            )


async def lock_statement(dsn: str) -> None:
    """What the lock statements add to BEGIN, alone: BEGIN READ ONLY; SET LOCAL ... with and
    without them, then ROLLBACK, on one connection (median / p95 ms of the one message): LOCK
    TABLE for tables (their partitions with them), the parse-only PREPARE ... AS SELECT FROM
    <relations>; DEALLOCATE for views, and for comparison the latter on every partition."""
    conn = await asyncpg.connect(dsn)
    begin = "BEGIN READ ONLY; SET LOCAL statement_timeout = 30000"
    table = "LOCK TABLE {} IN ACCESS SHARE MODE"
    parse = "PREPARE pg_mcp_server_lock AS SELECT FROM {}; DEALLOCATE pg_mcp_server_lock"
    cases = {
        "BEGIN alone": begin,
        "BEGIN + LOCK TABLE 1 table": f"{begin}; {table.format('public.items')}",
        "BEGIN + a view and its 2 tables (as the server sends it)": (
            f"{begin}; {table.format('public.items, public.parts')}; "
            f"{parse.format('public.priced')}"
        ),
        "BEGIN + LOCK TABLE a table of 1,000 partitions": (
            f"{begin}; {table.format('public.parted')}"
        ),
        "BEGIN + the same 1,001 relations, parse-only": f"{begin}; {parse.format(PARTITIONS)}",
    }
    try:
        for name, sql in cases.items():
            samples: list[float] = []
            for _ in range(RUNS if "1,00" in name else RUNS * 3):
                start = time.perf_counter_ns()
                await conn.execute(sql)
                samples.append((time.perf_counter_ns() - start) / 1e6)
                await conn.execute("ROLLBACK")
            ordered = sorted(samples)
            median, p95 = statistics.median(ordered), ordered[round(0.95 * len(ordered)) - 1]
            print(f"| {name} (one message) | 1 | {median:.3f} / {p95:.3f} |", flush=True)
    finally:
        await conn.close()


def main() -> None:
    print(f"\nserver code: {Path(pg_mcp_server.__file__).parent}")
    with EmbeddedPostgres() as pg:
        dsn = pg.create_database("locks")

        async def run() -> None:
            conn = await asyncpg.connect(dsn)
            try:
                await conn.execute(SETUP)
            finally:
                await conn.close()
            async with relay(dsn) as wire:
                await measure(dsn, wire, dsn.split("/")[3].split("?")[0])
            await lock_statement(dsn)

        print(f"{header()}\n")
        print("| call | round trips, the background reset included | median / p95 ms |")
        print("|---|---|---|")
        asyncio.run(run())


if __name__ == "__main__":
    main()

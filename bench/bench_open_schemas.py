"""What running a statement without the open schemas costs (docs/security.md, "Schemas anyone
may create in"): round trips and milliseconds of a repeated guarded call, with no open schema
on the path, then with `public` open (a role that is not trusted granted CREATE on it), where
each call's path leaves it out (`SET LOCAL search_path`, sent with BEGIN) and a table there is
named with its schema.

Same harness as bench_guard_locks.py (server in process, one pooled connection, a counting
relay; WARMUP untimed calls, then RUNS timed ones: median / p95 ms, flights per call with the
background reset). To compare with another checkout: `PYTHONPATH=<checkout>/src`.

Run: uv run python bench/bench_open_schemas.py   (~1 min)
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import asyncpg
from bench_guard_locks import settled
from common import ROOT, SUPERUSER_OK, call_tool, header, summary
from mcp import Client

import pg_mcp_server
from pg_mcp_server.config import Settings
from pg_mcp_server.embedded import EmbeddedPostgres
from pg_mcp_server.server import build_server

WARMUP = 20
RUNS = 300
SETUP = """
CREATE SCHEMA app;
CREATE TABLE app.items (id int PRIMARY KEY, label text);
INSERT INTO app.items SELECT g, 'item ' || g FROM generate_series(1, 1000) g;
CREATE TABLE public.items (id int PRIMARY KEY, label text);
INSERT INTO public.items SELECT g, 'item ' || g FROM generate_series(1, 1000) g;
CREATE ROLE bench_planter NOLOGIN;
ANALYZE;
"""
CASES: list[tuple[str, dict[str, Any]]] = [
    ("execute_query", {"sql": "SELECT 1 AS one"}),
    ("execute_query", {"sql": "SELECT id, label FROM app.items WHERE id <= 10 ORDER BY id"}),
    ("execute_query", {"sql": "SELECT id, label FROM items WHERE id <= 10 ORDER BY id"}),
    ("get_sample_rows", {"schema_name": "app", "table_name": "items"}),
]


async def measure(dsn: str, wire: Any, database: str, label: str) -> None:
    settings = Settings.load(
        database={"dsn": wire.dsn(database), "pool_size": 1}, server=SUPERUSER_OK
    )
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
                f"| {label} | {tool}({shown}) | {min(flights)}-{max(flights)} "
                f"| {summary(samples)} |",
                flush=True,
            )


def main() -> None:
    import sys

    sys.path.insert(0, str(ROOT / "tests"))
    from wire import relay

    print(f"\nserver code: {Path(pg_mcp_server.__file__).parent}")
    with EmbeddedPostgres() as pg:
        dsn = pg.create_database("open_schemas")
        database = dsn.split("/")[3].split("?")[0]

        async def run() -> None:
            conn = await asyncpg.connect(dsn)
            try:
                await conn.execute(SETUP)
                async with relay(dsn) as wire:
                    await measure(dsn, wire, database, "no open schema")
                    await conn.execute("GRANT CREATE ON SCHEMA public TO bench_planter")
                    await measure(dsn, wire, database, "public open")
            finally:
                await conn.close()

        print(f"{header()}\n")
        print("| path | call | round trips, the background reset included | median / p95 ms |")
        print("|---|---|---|---|")
        asyncio.run(run())


if __name__ == "__main__":
    main()

"""Where one call's server CPU goes: cProfile over repeated calls of the peer run's three
operations (SELECT 1, 100 rows, describe), grouped by who spends it.

The server runs in process (`mcp.Client(build_server(settings))`, the modern direct dispatch:
no transport, no JSON framing) on a throwaway PostgreSQL 18 with a 1,000-row `film`-like
table; calls skip the client's output-schema check (common.call_tool), so what is counted is
the SDK's request handling (mcp/), ours (pg_mcp_server/), the driver and pool (asyncpg,
sqlalchemy), pydantic, json and the event loop. The transport is what the peer run adds on top
(bench/README.md, "Profile of one call").

Run: uv run python bench/profile_call.py [--calls 300]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import time
from collections import defaultdict
from typing import Any

from common import SUPERUSER_OK, call_tool, header, made_database
from mcp import Client

from pg_mcp_server.config import Settings
from pg_mcp_server.embedded import EmbeddedPostgres
from pg_mcp_server.server import build_server

SETUP = """
CREATE TABLE film (
    film_id integer PRIMARY KEY, title text NOT NULL, description text, release_year integer,
    rental_rate numeric(4,2) NOT NULL, length smallint, last_update timestamptz NOT NULL
);
INSERT INTO film SELECT g, 'Film ' || g, repeat('a story ', 8), 2000 + g % 20,
    (g % 5) + 0.99, 60 + g % 120, now() FROM generate_series(1, 1000) g;
ANALYZE film;
"""
OPERATIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "SELECT 1": ("execute_query", {"sql": "SELECT 1"}),
    "100 rows": ("execute_query", {"sql": "SELECT * FROM film ORDER BY film_id", "limit": 100}),
    "describe": ("describe_table", {"table_name": "film"}),
}
GROUPS = (
    ("mcp/", "SDK (mcp, mcp_types)"),
    ("mcp_types/", "SDK (mcp, mcp_types)"),
    ("pg_mcp_server/", "ours"),
    ("asyncpg/", "driver and pool"),
    ("sqlalchemy/", "driver and pool"),
    ("pydantic", "pydantic"),
    ("json/", "json"),
    ("asyncio/", "event loop"),
    ("anyio/", "event loop"),
)


def group(filename: str) -> str:
    for part, name in GROUPS:
        if part in filename:
            return name
    return "other (builtins, stdlib)"


async def profile(dsn: str, calls: int, verbose: bool) -> None:
    settings = Settings.load(database={"dsn": dsn}, server=SUPERUSER_OK)
    async with Client(build_server(settings)) as client:
        for name, (tool, arguments) in OPERATIONS.items():
            for _ in range(20):  # warm: prepared statements, caches, the guard's facts
                await call_tool(client, tool, arguments)
            profiler = cProfile.Profile()
            started = time.process_time()
            profiler.enable()
            for _ in range(calls):
                await call_tool(client, tool, arguments)
            profiler.disable()
            cpu_ms = (time.process_time() - started) * 1000 / calls
            totals: dict[str, float] = defaultdict(float)
            stats = pstats.Stats(profiler)
            for (filename, _, _), row in stats.stats.items():  # type: ignore[attr-defined]
                totals[group(filename)] += row[2]  # own time (tottime)
            whole = sum(totals.values())
            shares = ", ".join(
                f"{k} {v / whole:.0%}" for k, v in sorted(totals.items(), key=lambda kv: -kv[1])
            )
            print(f"| {name} | {cpu_ms:.2f} | {shares} |", flush=True)
            if verbose:
                stats.sort_stats("tottime").print_stats(12)


async def prepare(pg: EmbeddedPostgres) -> str:
    return await made_database(pg, "profile_call", SETUP)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--verbose", action="store_true", help="the top functions of each")
    args = parser.parse_args()
    with EmbeddedPostgres() as pg:
        dsn = asyncio.run(prepare(pg))
        print(f"\n{header()}\n")
        print("| operation | CPU ms per call (client and server, in process) | own time by part |")
        print("|---|---|---|")
        asyncio.run(profile(dsn, args.calls, args.verbose))


if __name__ == "__main__":
    main()

"""`pg-mcp-server --dsn DSN` over stdio, plus bench tools, for bench_stdio.py / bench_query.py.

Settings, logging and build_server are exactly what the console script uses; the additions are
`bench_constant`, an async tool that touches no database and returns an int (so it has an
output schema and structured content too), and `bench_memory`, which reports this process's
resident set size now and at its peak (VmRSS / VmHWM from /proc/self/status). Timing
bench_constant next to a real tool on the same process isolates what the tool adds on top of
the MCP stdio round trip. `bench_one_round_trip(sql)` is the least a database-backed tool can
do: one round trip (`SELECT 1` on a connection of its own, no pool, guard, transaction or
reset) and an answer shaped like execute_query's.

With `--profile PATH` it also has `bench_profile(action)`: "start" turns cProfile on, "stop"
turns it off and writes the stats to PATH, so only the calls in between are profiled.
`--max-result-bytes N` sets MCP_MAX_RESULT_BYTES (execute_query's cap on row JSON).

Run (normally spawned by bench_stdio.py): uv run python bench/stdio_server.py --dsn DSN
"""

from __future__ import annotations

import argparse
import cProfile
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

import asyncpg
from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult

from pg_mcp_server.config import Settings
from pg_mcp_server.database.queries import query_hash
from pg_mcp_server.logs import configure_logging
from pg_mcp_server.models.results import ExecuteQueryOutput
from pg_mcp_server.server import build_server
from pg_mcp_server.tools.registry import ok_json


async def bench_constant() -> int:
    """Return 42; no I/O (an async tool, like ours, so no worker-thread hop)."""
    return 42


async def bench_memory() -> dict[str, int]:
    """This process's resident set size in kB: now (VmRSS) and peak (VmHWM)."""
    with open("/proc/self/status") as status:
        fields = dict(line.split(":", 1) for line in status)
    return {key: int(fields[key].split()[0]) for key in ("VmRSS", "VmHWM")}


def one_round_trip_tool(connect: dict[str, Any]) -> Callable[[str], Awaitable[CallToolResult]]:
    """A tool that does the least any database-backed tool must: one round trip (a cached
    `SELECT 1` on a connection of its own: no pool, guard, transaction or reset) and an answer
    shaped like execute_query's. Timing it next to bench_constant shows what one round trip
    costs over stdio on this machine."""
    state: dict[str, asyncpg.Connection] = {}

    async def bench_one_round_trip(sql: str) -> Annotated[CallToolResult, ExecuteQueryOutput]:
        """SELECT 1 on a dedicated connection (benchmark)."""
        if "conn" not in state:
            state["conn"] = await asyncpg.connect(**connect)
        value = await state["conn"].fetchval("SELECT 1")
        rows = [{"?column?": value}]
        return ok_json(
            {
                "columns": [{"name": "?column?", "data_type": "integer"}],
                "rows": rows,
                "row_count": 1,
                "has_more": False,
                "execution_time_ms": 0.0,
                "query_hash": query_hash(sql),
                "note": None,
            }
        )

    return bench_one_round_trip


def profile_tool(path: str) -> Callable[[Literal["start", "stop"]], Awaitable[str]]:
    profiler = cProfile.Profile()

    async def bench_profile(action: Literal["start", "stop"]) -> str:
        """Start cProfile, or stop it and write the stats file."""
        if action == "start":
            profiler.enable()
        else:
            profiler.disable()
            profiler.dump_stats(path)
        return action

    return bench_profile


def bench_server(settings: Settings, profile: str | None = None) -> MCPServer[Any]:
    """build_server(settings) as the console script does, plus the bench tools."""
    server = build_server(settings)
    server.add_tool(bench_constant, name="bench_constant", description="Return 42 (benchmark).")
    server.add_tool(bench_memory, name="bench_memory", description="RSS of this process (kB).")
    server.add_tool(
        one_round_trip_tool(settings.database.connect_kwargs()), name="bench_one_round_trip"
    )
    if profile:
        server.add_tool(profile_tool(profile), name="bench_profile")
    return server


def main() -> None:
    p = argparse.ArgumentParser(description="pg-mcp-server over stdio plus bench_constant")
    p.add_argument("--dsn", required=True, help="PostgreSQL connection URI")
    p.add_argument("--profile", metavar="PATH", help="add bench_profile, writing stats to PATH")
    p.add_argument("--max-result-bytes", type=int, help="MCP_MAX_RESULT_BYTES")
    args = p.parse_args()
    settings = Settings.load(
        database={"dsn": args.dsn}, server={"max_result_bytes": args.max_result_bytes}
    )
    configure_logging(settings.server.log_level, settings.server.log_format)
    bench_server(settings, args.profile).run("stdio")


if __name__ == "__main__":
    main()

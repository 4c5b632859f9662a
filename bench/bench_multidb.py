"""What routing by database costs a call: CPU per `execute_query("SELECT 1")` on a server of
one database (environment settings) and on a server of two (a configuration file), calling
the default database and naming it, in rounds that alternate so that the machine's load
falls on all three alike.

The server runs in process (`mcp.Client(build_server(...))`) on a throwaway PostgreSQL 18;
calls skip the client's output-schema check (common.call_tool).

Run: uv run python bench/bench_multidb.py [--calls 500] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from common import SUPERUSER_OK, call_tool, header, made_database
from mcp import Client

from pg_mcp_server.config import Settings
from pg_mcp_server.configfile import load
from pg_mcp_server.embedded import EmbeddedPostgres
from pg_mcp_server.server import build_server

WARM = 50
SQL = {"sql": "SELECT 1 AS x"}


async def cpu_ms(client: Client, arguments: dict[str, Any], calls: int) -> float:
    for _ in range(WARM):
        await call_tool(client, "execute_query", arguments)
    start = time.process_time()
    for _ in range(calls):
        result = await call_tool(client, "execute_query", arguments)
        assert not result.is_error, result
    return (time.process_time() - start) / calls * 1000


async def measure(pg: EmbeddedPostgres, calls: int, rounds: int) -> None:
    a = await made_database(pg, "bench_multidb_a", "CREATE TABLE t (id int PRIMARY KEY)")
    b = await made_database(pg, "bench_multidb_b", "CREATE TABLE t (id int PRIMARY KEY)")
    path = Path(tempfile.mkdtemp()) / "pg-mcp.yaml"
    path.write_text(
        "server: {allow_privileged_role: true}\n"
        f"databases:\n  - {{name: a, default: true, dsn: '{a}'}}\n  - {{name: b, dsn: '{b}'}}\n"
    )
    config = load(str(path))
    one = Settings.load(database={"dsn": a}, server=SUPERUSER_OK)
    print("| round | one database | two, the default | two, naming it |")
    print("|---|---|---|---|")
    for n in range(rounds):
        async with Client(build_server(one, [])) as client:
            alone = await cpu_ms(client, SQL, calls)
        async with Client(build_server(config.settings, [], config=config)) as client:
            default = await cpu_ms(client, SQL, calls)
            named = await cpu_ms(client, {**SQL, "database": "a"}, calls)
        print(f"| {n + 1} | {alone:.3f} ms | {default:.3f} ms | {named:.3f} ms |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with EmbeddedPostgres() as pg:
        print(f"\n{header()}\nCPU per call (client and server, in process)\n")
        asyncio.run(measure(pg, args.calls, args.rounds))


if __name__ == "__main__":
    main()

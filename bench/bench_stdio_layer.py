"""What our stdio layer (stdio.py: pipes in front of the SDK's transport) costs per message:
sequential round trips over stdio to the same server, served by `pg-mcp-server` (our layer) and
by the SDK's own transport alone (`MCPServer.run("stdio")`), interleaved.

    uv run python bench/bench_stdio_layer.py --dsn postgresql://...  [--calls 300 --rounds 5]

`ping` measures the transport alone, `SELECT 1` a whole tool call, `100 rows` one with a
larger answer. Round trips on this shared
machine are noisy; the server's CPU per call (its process, from /proc) much less so. Compare
the columns of one run, not runs with each other.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import psutil

SDK_ONLY = """
import sys
from pg_mcp_server.config import Settings
from pg_mcp_server.logs import configure_logging
from pg_mcp_server.server import build_server
configure_logging("WARNING", "json")
build_server(Settings.load(), []).run("stdio")
"""
INIT = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"},
    },
}
CALLS: dict[str, dict[str, object]] = {
    "ping": {"method": "ping"},
    "SELECT 1": {
        "method": "tools/call",
        "params": {"name": "execute_query", "arguments": {"sql": "SELECT 1 AS one"}},
    },
    "100 rows": {  # ~30 KB: more than a pipe takes in one atomic write
        "method": "tools/call",
        "params": {
            "name": "execute_query",
            "arguments": {
                "sql": "SELECT g, repeat('x', 200) AS pad FROM generate_series(1, 100) g"
            },
        },
    },
}


def exchange(stdin: IO[bytes], stdout: IO[bytes], message: dict[str, object]) -> None:
    stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
    stdin.flush()
    if "id" in message:
        assert b'"result"' in stdout.readline()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG_", "MCP_"))}
    env |= {"PG_DSN": args.dsn, "MCP_LOG_LEVEL": "WARNING"}
    servers = {
        "ours": [str(Path(sys.executable).parent / "pg-mcp-server")],
        "SDK only": [sys.executable, "-c", SDK_ONLY],
    }
    procs = {
        name: subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        for name, argv in servers.items()
    }
    times: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], float] = {}
    try:
        for proc in procs.values():
            assert proc.stdin is not None and proc.stdout is not None
            exchange(proc.stdin, proc.stdout, INIT)
            exchange(proc.stdin, proc.stdout, {"method": "notifications/initialized"})
        for _ in range(args.rounds):
            for op, call in CALLS.items():
                for name, proc in procs.items():
                    assert proc.stdin is not None and proc.stdout is not None
                    used = sum(psutil.Process(proc.pid).cpu_times()[:2])
                    for i in range(args.calls):
                        started = time.perf_counter()
                        exchange(proc.stdin, proc.stdout, {"id": i + 1, **call})
                        times.setdefault((op, name), []).append(time.perf_counter() - started)
                    used = sum(psutil.Process(proc.pid).cpu_times()[:2]) - used
                    cpu[(op, name)] = cpu.get((op, name), 0.0) + used
    finally:
        for proc in procs.values():
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(30)
    calls = args.rounds * args.calls
    print(f"stdio, {calls} calls each (load {os.getloadavg()[0]:.1f}): median round trip, CPU/call")
    for op in CALLS:
        ours, sdk = (statistics.median(times[(op, n)]) * 1e6 for n in servers)
        ours_cpu, sdk_cpu = (cpu[(op, n)] / calls * 1e6 for n in servers)
        print(
            f"  {op:9} ours {ours:6.0f} us, {ours_cpu:5.0f} us CPU   "
            f"SDK only {sdk:6.0f} us, {sdk_cpu:5.0f} us CPU"
        )


if __name__ == "__main__":
    main()

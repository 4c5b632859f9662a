"""Cold start: spawn -> `initialize` answered, ours (`uv run pg-mcp-server`, as the shared peer
benchmark starts it) against the SDK floor (`../shared/bench-peers/floor_server.py`, an
MCPServer whose tools return constants, run by this project's Python: the same SDK, the same
compiled files). Also spawn -> the first `tools/list` answer, which the client sends next.

    uv run python bench/bench_start.py --dsn postgresql://...  [--rounds 10]

Starts are interleaved (floor, ours, floor, ...) so that load from elsewhere hits both alike;
medians are printed with the ratio. The machine is shared: the figures are noisy, the ratio
less so. Without --dsn, a throwaway embedded PostgreSQL with the demo data is used.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).parents[1]
FLOOR = ROOT.parent / "shared" / "bench-peers" / "floor_server.py"
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"},
    },
}
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}


def one_start(argv: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    """Seconds from spawn to the initialize answer, and to the tools/list answer; and the CPU
    seconds of the whole run (its process tree, spawn to exit), less disturbed by the load."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        env=env, cwd=ROOT,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(INIT).encode() + b"\n")
    proc.stdin.flush()
    assert b'"result"' in proc.stdout.readline()
    initialized = time.perf_counter() - started
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    proc.stdin.write(json.dumps(note).encode() + b"\n" + json.dumps(LIST).encode() + b"\n")
    proc.stdin.flush()
    assert b'"tools"' in proc.stdout.readline()
    listed = time.perf_counter() - started
    proc.stdin.close()
    proc.wait(30)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return initialized, listed, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", help="database for our server (default: an embedded demo)")
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    uv = os.environ.get("UV") or shutil.which("uv")
    assert uv and FLOOR.exists(), "needs uv and ../shared/bench-peers"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG_", "MCP_"))}
    demo = None
    if args.dsn is None:
        from pg_mcp_server.demo import start_demo

        demo = start_demo()
        args.dsn = demo.__enter__()
    servers = {
        "floor": ([sys.executable, str(FLOOR)], env),
        "ours": ([uv, "run", "pg-mcp-server"], {**env, "PG_DSN": args.dsn}),
    }
    try:
        for argv, environ in servers.values():  # warm the page cache, discarded
            one_start(argv, environ)
        results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in servers}
        for _ in range(args.rounds):
            for name, (argv, environ) in servers.items():
                results[name].append(one_start(argv, environ))
    finally:
        if demo is not None:
            demo.__exit__(None, None, None)
    medians = {
        name: [statistics.median(r[i] for r in runs) * 1000 for i in range(3)]
        for name, runs in results.items()
    }
    print(f"cold start, median of {args.rounds} (spawn -> answer), load {os.getloadavg()[0]:.1f}")
    for name, (init, listed, cpu) in medians.items():
        print(f"  {name:5} initialize {init:5.0f} ms, tools/list {listed:5.0f}, cpu {cpu:5.0f}")
    ratio = medians["ours"][0] / medians["floor"][0]
    cpu_ratio = medians["ours"][2] / medians["floor"][2]
    print(f"  ours / floor: {ratio:.2f}x (initialize), {cpu_ratio:.2f}x (cpu of the whole run)")


if __name__ == "__main__":
    main()

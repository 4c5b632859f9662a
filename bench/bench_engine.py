"""How a query runs, measured: server CPU per call and where it goes, round trips on the wire,
and the three ways of reading rows that were weighed for the memory bound.

    uv run python bench/bench_engine.py [--calls 300] [--src DIR]

A throwaway PostgreSQL 18 with Pagila; the server is `python -m pg_mcp_server` over stdio (from
this checkout, or from DIR/src, to measure another commit the same way), reached through a TCP
relay that counts flights (tests/wire.py); its CPU is read from the process (psutil), and a
second run under cProfile says where it went, by package. No monkeypatching. On a shared
machine the figures are noisy: compare them within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import pstats
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import psutil
from common import load_pagila
from mcp import Client, StdioServerParameters

from pg_mcp_server.embedded import EmbeddedPostgres

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from wire import relay

ROWS = "SELECT * FROM film ORDER BY film_id LIMIT 100"
WIDE = "SELECT repeat('x', 1000000) FROM generate_series(1, 200)"
PACKAGES = ("pg_mcp_server", "mcp", "pydantic", "jsonschema", "asyncpg", "sqlalchemy", "anyio")


# The server's own entry point under a CPU-time profiler (cProfile's command line would time
# the wall clock, waits included), on between SIGUSR1 and SIGUSR2 (warm calls only).
PROFILED = """
import cProfile, signal, sys, time
profile, path = cProfile.Profile(time.process_time), sys.argv.pop(1)
signal.signal(signal.SIGUSR1, lambda *_: profile.enable())
signal.signal(signal.SIGUSR2, lambda *_: (profile.disable(), profile.dump_stats(path)))
from pg_mcp_server.__main__ import main
main()
"""


def _server(dsn: str, src: Path | None, profile: Path | None) -> StdioServerParameters:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG_", "MCP_"))}
    if src is not None:
        env["PYTHONPATH"] = str(src / "src")
    start = ["-c", PROFILED, str(profile)] if profile else ["-m", "pg_mcp_server"]
    return StdioServerParameters(
        command=sys.executable,
        args=[*start, "--dsn", dsn, "--log-level", "WARNING"],
        env=env,
    )


def _server_process() -> psutil.Process:
    for child in psutil.Process().children(recursive=True):
        if "pg_mcp_server" in " ".join(child.cmdline()):
            return child
    raise RuntimeError("server process not found")


async def serve(dsn: str, src: Path | None, calls: int) -> dict[str, Any]:
    """Server CPU (ms per call) and round trips per call (relay flights, the background reset
    included) for three calls, then the profile by package of the 100-row call."""
    out: dict[str, Any] = {}
    name = urlsplit(dsn).path.lstrip("/")
    cases: dict[str, dict[str, Any]] = {
        "SELECT 1": {"sql": "SELECT 1"},
        "100 film rows": {"sql": ROWS, "limit": 100},
        "100 film rows, timeout_ms=5000": {"sql": ROWS, "limit": 100, "timeout_ms": 5000},
    }
    async with relay(dsn) as wire, Client(_server(wire.dsn(name), src, None)) as client:
        server = _server_process()
        for label, arguments in cases.items():
            for _ in range(30):
                await client.call_tool("execute_query", arguments)
            await asyncio.sleep(0.2)  # the last background reset
            cpu, flights = server.cpu_times(), wire.flights
            for _ in range(calls):
                await client.call_tool("execute_query", arguments)
            await asyncio.sleep(0.2)
            used = server.cpu_times()
            out[label] = {
                "server_cpu_ms": round(
                    (used.user + used.system - cpu.user - cpu.system) / calls * 1000, 2
                ),
                "round_trips": round((wire.flights - flights) / calls, 2),
            }
    with tempfile.TemporaryDirectory() as tmp:
        profile = Path(tmp) / "server.prof"
        async with Client(_server(dsn, src, profile)) as client:
            for _ in range(30):
                await client.call_tool("execute_query", cases["100 film rows"])
            server = _server_process()
            server.send_signal(signal.SIGUSR1)
            for _ in range(calls):
                await client.call_tool("execute_query", cases["100 film rows"])
            server.send_signal(signal.SIGUSR2)
            while not profile.exists():
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.2)  # dump_stats writes the file in one go, but let it close
        stats = pstats.Stats(str(profile))
    total = sum(s[2] for s in stats.stats.values())  # type: ignore[attr-defined]
    by_package: dict[str, float] = {}
    for (filename, _, _), (_, _, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        package = next((p for p in PACKAGES if f"/{p}/" in filename), "other")
        if filename.endswith(("json/encoder.py", "json/decoder.py")):
            package = "json"
        by_package[package] = by_package.get(package, 0.0) + tottime
    out["profile (share of the server's time, 100 rows)"] = {
        k: f"{v / total:.0%}" for k, v in sorted(by_package.items(), key=lambda kv: -kv[1])
    }
    stats.sort_stats("tottime")
    top = io.StringIO()
    stats.stream = top  # type: ignore[attr-defined]
    stats.print_stats(12)
    out["top functions"] = [line for line in top.getvalue().splitlines() if "(" in line][:12]
    return out


# --- the candidates for reading rows within a byte bound (each run in a process of its own) --


async def candidate(name: str, dsn: str, calls: int) -> dict[str, Any]:
    """One way of reading rows: (a) fetch everything, then convert in Python (the old way),
    (b) a cursor in an explicit transaction, reading in batches until the cap, (c) PostgreSQL
    makes the JSON and stops at the cap (rewrite.py). Round trips, CPU per 100 film rows, and
    the peak resident set while reading 200 rows of 1 MB with a 4 MB cap."""
    from pg_mcp_server.config import Settings
    from pg_mcp_server.database.engine import Database
    from pg_mcp_server.database.queries import Shapes, fetch_rows

    cap = 4_000_000
    shapes = Shapes()
    name_db = urlsplit(dsn).path.lstrip("/")

    async def read(conn: asyncpg.Connection, sql: str) -> int:
        if name == "a":
            rows = await (await db.prepare(conn, sql))[0].fetch()
            text = json.dumps([[str(v) if v is not None else None for v in r] for r in rows])
            return len(text[:cap])
        if name == "b":
            kept, size = 0, 0
            async with conn.transaction(readonly=True):
                stmt, _ = await db.prepare(conn, sql)
                async for record in stmt.cursor(prefetch=50):
                    size += len(json.dumps([str(v) for v in record]))
                    if size > cap:
                        break
                    kept += 1
            return kept
        got = await fetch_rows(
            conn, db, shapes, sql, None, limit=1000, max_bytes=cap, sensitive=None
        )
        return len(got.rows_json)

    async with relay(dsn) as wire:
        db = Database(Settings.load(database={"dsn": wire.dsn(name_db), "pool_size": 1}).database)
        try:
            for _ in range(20):
                await db.run(lambda c: read(c, ROWS))
            flights, start = wire.flights, time.process_time()
            for _ in range(calls):
                await db.run(lambda c: read(c, ROWS))
            cpu_ms = (time.process_time() - start) / calls * 1000
            trips = (wire.flights - flights) / calls
            idle = psutil.Process().memory_info().rss
            Path("/proc/self/clear_refs").write_text("5")
            await db.run(lambda c: read(c, WIDE))
            peak = _hwm() - idle
        finally:
            await db.dispose()
    return {
        "round_trips": round(trips, 2),
        "cpu_ms": round(cpu_ms, 2),
        "peak_mb": round(peak / 1e6, 1),
    }


def _hwm() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("VmHWM")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--src", type=Path, help="another checkout to measure the same way")
    parser.add_argument("--candidate", help=argparse.SUPPRESS)
    parser.add_argument("--dsn", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.candidate:
        print(json.dumps(await candidate(args.candidate, args.dsn, args.calls)))
        return
    print(f"load average {os.getloadavg()[0]:.2f}")
    with EmbeddedPostgres() as pg:
        dsn = pg.create_database("pagila")
        load_pagila(dsn)
        results = await serve(dsn, args.src, args.calls)
        for label in ("a", "b", "c"):
            proc = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--candidate",
                    label,
                    "--dsn",
                    dsn,
                    "--calls",
                    str(args.calls),
                ],
                capture_output=True,
                text=True,
            )
            if proc.returncode:
                raise RuntimeError(proc.stderr[-2000:])
            results[f"candidate {label}"] = json.loads(proc.stdout.strip().splitlines()[-1])
    out = io.StringIO()
    json.dump(results, out, indent=1)
    print(out.getvalue())
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    asyncio.run(main())

"""The server's memory while 20 clients page big results (issue 22): held results stay within
MCP_RESULT_STORE_BYTES, so the resident set stays bounded however many results are made.

One real HTTP server process (`pg-mcp-server --transport http`, one worker) on a throwaway
PostgreSQL 18, with a table of 20,000 rows of ~200 bytes (about 4 MB of row JSON per result,
the MCP_MAX_RESULT_BYTES default). 20 clients, each with its own bearer token, each run
`SELECT * FROM big` with limit=20000 several times, paging every result to its end. The store's
budget is set below what 20 results take (so results are evicted: a client whose cursor
answers RESULT_EXPIRED counts it and runs the query again), and the server's resident set is
sampled every 20 ms (/proc/<pid>/status VmRSS), from after a warm-up (idle) to the end (peak).

Run: uv run python bench/bench_paging_memory.py [--store-mb 16] [--clients 20] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx2 as httpx
from common import header
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from pg_mcp_server.embedded import EmbeddedPostgres

EXECUTABLE = str(Path(sys.executable).parent / "pg-mcp-server")
SETUP = """
CREATE TABLE big (id integer PRIMARY KEY, label text NOT NULL, amount numeric(12, 2),
                  created timestamptz NOT NULL);
INSERT INTO big SELECT g, 'label ' || g || ' ' || repeat(chr(97 + g % 26), 120), g * 1.25,
       '2026-01-01'::timestamptz + g * interval '1 minute'
FROM generate_series(1, 20000) g;
ANALYZE big;
"""
SQL = "SELECT * FROM big ORDER BY id"


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def _client(url: str, token: str, rounds: int, tally: dict[str, int]) -> None:
    async with (
        httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        done = attempts = 0
        while done < rounds and attempts < 5 * rounds:  # evicted each time: give up
            attempts += 1
            result = await client.call_tool("execute_query", {"sql": SQL, "limit": 20000})
            out: Any = result.structured_content
            tally["queries"] += 1
            rows = out["row_count"]
            while out.get("next_cursor"):
                result = await client.call_tool("execute_query", {"cursor": out["next_cursor"]})
                out = result.structured_content
                if result.is_error:
                    tally["expired"] += 1
                    break
                tally["pages"] += 1
                rows += out["row_count"]
            else:
                assert rows == out.get("total_rows", rows), rows
                done += 1


async def _sample(pid: int, peak: list[int], stop: asyncio.Event) -> None:
    while not stop.is_set():
        peak[0] = max(peak[0], _rss(pid))
        await asyncio.sleep(0.02)


async def run(dsn: str, store_mb: int, clients: int, rounds: int) -> None:
    port = _free_port()
    tokens = [f"bench-token-{i}" for i in range(clients)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG_", "MCP_"))}
    env |= {
        "MCP_ALLOW_PRIVILEGED_ROLE": "true",
        "MCP_AUTH_TOKENS": ",".join(tokens),
        "MCP_MAX_ROWS": "20000",
        "MCP_RESULT_STORE_BYTES": str(store_mb * 1024 * 1024),
        "MCP_LOG_LEVEL": "WARNING",
    }
    proc = subprocess.Popen(
        [EXECUTABLE, "--transport", "http", "--port", str(port), "--dsn", dsn],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        async with httpx.AsyncClient() as probe:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if (await probe.get(f"http://127.0.0.1:{port}/health")).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("the server did not start")
                await asyncio.sleep(0.1)
        warm: dict[str, int] = {"queries": 0, "pages": 0, "expired": 0}
        await _client(url, tokens[0], 1, warm)  # imports, pool, the statement's shape
        idle = _rss(proc.pid)
        peak = [idle]
        stop = asyncio.Event()
        tally = {"queries": 0, "pages": 0, "expired": 0}
        sampler = asyncio.create_task(_sample(proc.pid, peak, stop))
        started = time.monotonic()
        await asyncio.gather(*(_client(url, t, rounds, tally) for t in tokens))
        elapsed = time.monotonic() - started
        stop.set()
        await sampler
        end = _rss(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    mb = 1024 * 1024
    print(
        f"| {store_mb} MB | {clients} x {rounds} | {tally['queries']} / {tally['pages']} / "
        f"{tally['expired']} | {idle / mb:.0f} MB | {peak[0] / mb:.0f} MB | "
        f"{(peak[0] - idle) / mb:.0f} MB | {end / mb:.0f} MB | {elapsed:.0f} s |",
        flush=True,
    )


async def prepare(pg: EmbeddedPostgres) -> str:
    dsn = pg.create_database("paging_memory")
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(SETUP)
    finally:
        await conn.close()
    return dsn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store-mb", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with EmbeddedPostgres() as pg:
        dsn = asyncio.run(prepare(pg))
        print(f"\n{header()}\n")
        print(
            "| MCP_RESULT_STORE_BYTES | clients x results each | queries / pages read / "
            "RESULT_EXPIRED | RSS idle | RSS peak | peak - idle | RSS at the end | time |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for store_mb in args.store_mb:
            asyncio.run(run(dsn, store_mb, args.clients, args.rounds))


if __name__ == "__main__":
    main()

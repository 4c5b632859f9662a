"""How fast `pg-mcp-server --demo` is ready: spawn over stdio -> initialize -> list_tables.

Issue target: ready in under 5 s. Each of RUNS runs spawns the server with
`mcp.Client(stdio_client(...))` and records, from just before the spawn:
  (a) the initialize answer (the Client's `__aenter__`: spawn, imports, embedded PostgreSQL
      start-up in a fresh temporary directory, demo schema and data, the start-up role audit,
      then the MCP handshake);
  (b) the first `list_tables` answer (default schema, public);
then how long the exit takes (stdin closed; the server stops and deletes its PostgreSQL),
and whether the server's temporary directory (/tmp/pg-mcp-server-*) is gone afterwards.

Two ways to spawn it: the installed console script next to this interpreter
(.venv/bin/pg-mcp-server, what an installed or `uvx` launch runs) and `uv run pg-mcp-server`
(what a source checkout's README suggests; uv adds its own start-up). For the split, the
demo's own start (`pg_mcp_server.demo.start_demo`: embedded PostgreSQL plus the demo schema
and data, no MCP) and the embedded server's alone (`EmbeddedPostgres()`: initdb, start) are
timed in this process RUNS times too.

Run: uv run python bench/bench_demo.py   (~1 min)
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchlib import ms_since, summary
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from pg_mcp_server.demo import start_demo
from pg_mcp_server.embedded import EmbeddedPostgres

RUNS = 5
TARGET_S = 5.0
ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.executable).with_name("pg-mcp-server")
TMP = Path(tempfile.gettempdir())
LAUNCHERS = {
    "console script (.venv/bin/pg-mcp-server --demo)": [str(SCRIPT), "--demo"],
    "uv run pg-mcp-server --demo": ["uv", "run", "--frozen", "pg-mcp-server", "--demo"],
}


@dataclass
class Runs:
    initialize: list[float] = field(default_factory=list)
    list_tables: list[float] = field(default_factory=list)
    exit: list[float] = field(default_factory=list)
    left_behind: int = 0
    tables: int = 0


def server_dirs() -> set[Path]:
    return set(TMP.glob("pg-mcp-server-*"))


async def one_run(command: list[str], runs: Runs, errlog_path: Path) -> None:
    params = StdioServerParameters(command=command[0], args=command[1:], cwd=ROOT)
    before = server_dirs()
    with errlog_path.open("a") as errlog:
        start = time.perf_counter_ns()
        client = Client(stdio_client(params, errlog=errlog))
        await client.__aenter__()
        try:
            runs.initialize.append(ms_since(start))
            mine = server_dirs() - before  # the server's PostgreSQL directory (and races)
            result = await client.call_tool("list_tables", {})
            runs.list_tables.append(ms_since(start))
            if result.is_error:
                raise RuntimeError(f"list_tables failed: {result.content}")
            runs.tables = (result.structured_content or {})["total_count"]
        finally:
            closing = time.perf_counter_ns()
            await client.__aexit__(None, None, None)
            runs.exit.append(ms_since(closing))
    runs.left_behind += sum(d.exists() for d in mine)


def demo_start_alone() -> tuple[list[float], list[float]]:
    """In this process: `start_demo()` (embedded PostgreSQL + demo schema and data), and
    `EmbeddedPostgres()` alone (initdb into a new directory, then start)."""
    demo, server = [], []
    for _ in range(RUNS):
        start = time.perf_counter_ns()
        with start_demo():
            demo.append(ms_since(start))
        start = time.perf_counter_ns()
        with EmbeddedPostgres():
            server.append(ms_since(start))
    return demo, server


def row(label: str, samples: list[float], target: bool) -> str:
    median = summary(samples)[0]
    verdict = ("yes" if median / 1000 < TARGET_S else "**NO**") if target else "-"
    every = ", ".join(f"{s / 1000:.2f}" for s in samples)
    return f"| {label} | {median / 1000:.2f} | {every} | {verdict} |"


async def bench(log: Path) -> list[str]:
    lines = []
    for label, command in LAUNCHERS.items():
        if shutil.which(command[0]) is None:
            lines.append(f"| {label} | not found | | |")
            continue
        runs = Runs()
        for _ in range(RUNS):
            await one_run(command, runs, log)
        lines.append(row(f"{label}: initialize answered", runs.initialize, True))
        lines.append(row(f"{label}: first list_tables answered", runs.list_tables, True))
        lines.append(row(f"{label}: exit after stdin closes", runs.exit, False))
        lines.append(
            f"| {label}: list_tables total_count {runs.tables}; server directories left "
            f"behind: {runs.left_behind} | | | |"
        )
    return lines


def main() -> None:
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "server-stderr.log"
        lines = asyncio.run(bench(log))
        demo, server = demo_start_alone()
    load_after = os.getloadavg()[0]
    print(f"{RUNS} runs each, seconds from spawn. 1-minute load average {load_before:.2f} before,")
    print(f"{load_after:.2f} after.\n")
    print(f"| what | median (s) | every run (s) | < {TARGET_S:g} s |")
    print("|---|---|---|---|")
    print("\n".join(lines))
    print(row("start_demo() alone, in-process (embedded PostgreSQL + demo data)", demo, False))
    print(row("EmbeddedPostgres() alone, in-process (initdb + start)", server, False))


if __name__ == "__main__":
    main()

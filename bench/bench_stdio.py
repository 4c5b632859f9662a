"""describe_table(film) versus a constant tool, over real stdio, on one server process.

Starts a throwaway PostgreSQL 18, loads Pagila (../shared/datasets/pagila, with /usr/bin/psql)
and VACUUM ANALYZEs it, spawns bench/stdio_server.py (our server plus `bench_constant`) with
`mcp.Client(stdio_client(...))`, and times RUNS calls of each tool after WARMUP. Each iteration
calls constant, describe, constant, describe: the first pair with the client's default
output-schema validation (jsonschema), the second with it switched off
(ClientSession.validate_tool_result -> no-op), so all four see the same machine state. The
server's stderr goes to a temporary file.

For reference the same server is then timed in-process (`mcp.Client(server)`, no transport),
with stopwatches splitting describe_table's time server-side. If describe_table misses the
target over stdio, a second server runs under cProfile for PROFILED_CALLS describe_table calls
(validation off) while the client side is profiled too, and the top functions are printed.

Run: uv run python bench/bench_stdio.py
"""

from __future__ import annotations

import asyncio
import cProfile
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchlib import (
    Stopwatch,
    create_database,
    embedded_server,
    ms_since,
    summary,
    top_functions,
)
from mcp import Client, StdioServerParameters
from mcp.client.session import ClientSession
from mcp.client.stdio import stdio_client
from mcp_types import CallToolResult
from stdio_server import bench_server

from pg_mcp_server.config import Settings
from pg_mcp_server.database import catalog

WARMUP = 20
RUNS = 200
TARGET_RATIO = 1.5
PROFILED_CALLS = 200

ROOT = Path(__file__).resolve().parents[1]
PAGILA = ROOT.parent / "shared" / "datasets" / "pagila"
PSQL = "/usr/bin/psql"

Tool = tuple[str, dict[str, Any]]
DESCRIBE: Tool = ("describe_table", {"table_name": "film"})
CONSTANT: Tool = ("bench_constant", {})
Samples = dict[tuple[str, bool], list[float]]  # (tool name, client validates) -> ms


def load_pagila(dsn: str) -> float:
    """Load the schema and data with psql; returns seconds."""
    start = time.perf_counter()
    files = ["pagila-schema.sql", "pagila-data.sql"]
    subprocess.run(
        [PSQL, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn]
        + [arg for f in files for arg in ("-f", str(PAGILA / f))]
        + ["-c", "VACUUM ANALYZE"],
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=300,
    )
    return time.perf_counter() - start


async def _no_validation(self: ClientSession, name: str, result: CallToolResult) -> None:
    return None


_VALIDATE = ClientSession.validate_tool_result


@contextmanager
def client_validation(on: bool) -> Iterator[None]:
    """The client checks results against the tool's output schema (`on`) or not; nestable."""
    previous = ClientSession.validate_tool_result
    ClientSession.validate_tool_result = _VALIDATE if on else _no_validation  # type: ignore[method-assign]
    try:
        yield
    finally:
        ClientSession.validate_tool_result = previous  # type: ignore[method-assign]


async def call(client: Client, tool: Tool) -> CallToolResult:
    result = await client.call_tool(*tool)
    if result.is_error:
        raise RuntimeError(f"{tool[0]} failed: {result.content}")
    return result


async def interleaved(client: Client, validation: tuple[bool, ...]) -> Samples:
    samples: Samples = {(t[0], v): [] for t in (CONSTANT, DESCRIBE) for v in validation}
    for i in range(WARMUP + RUNS):
        for validate in validation:
            for tool in (CONSTANT, DESCRIBE):
                with client_validation(validate):
                    start = time.perf_counter_ns()
                    await call(client, tool)
                    elapsed = ms_since(start)
                if i >= WARMUP:
                    samples[(tool[0], validate)].append(elapsed)
    return samples


def ratio(samples: Samples, validate: bool) -> float:
    describe = summary(samples[(DESCRIBE[0], validate)])[0]
    return describe / summary(samples[(CONSTANT[0], validate)])[0]


def row(phase: str, samples: Samples, validate: bool, judged: bool = True) -> str:
    """A table row; `judged` rows are held to TARGET_RATIO (the stdio ones)."""
    d_med, d_p95 = summary(samples[(DESCRIBE[0], validate)])
    c_med, c_p95 = summary(samples[(CONSTANT[0], validate)])
    r = ratio(samples, validate)
    verdict = ("yes" if r <= TARGET_RATIO else "NO") if judged else "(reference)"
    times = f"{d_med:.2f} / {d_p95:.2f} | {c_med:.2f} / {c_p95:.2f}"
    return f"| {phase} | {times} | {r:.2f}x | {verdict} |"


def server_params(dsn: str, profile_to: Path | None = None) -> StdioServerParameters:
    args = [str(Path(__file__).with_name("stdio_server.py")), "--dsn", dsn]
    if profile_to:
        args += ["--profile", str(profile_to)]
    return StdioServerParameters(command=sys.executable, args=args, cwd=ROOT)


async def in_process(dsn: str) -> tuple[str, str]:
    """The same server without transport (validation off), splitting describe_table's time.

    Stopwatches around the describe_table tool function (reached through the SDK's private
    tool manager) and around catalog.describe_table (the one catalog statement).
    """
    server = bench_server(Settings.load(database={"dsn": dsn}))
    tool = server._tool_manager.get_tool(DESCRIBE[0])  # private; bench only
    assert tool is not None
    in_tool, in_query = Stopwatch(), Stopwatch()
    tool.fn = in_tool.wrap(tool.fn)
    real_query = catalog.describe_table
    catalog.describe_table = in_query.wrap(real_query)  # type: ignore[assignment]
    try:
        async with Client(server) as client:
            samples = await interleaved(client, (False,))
    finally:
        catalog.describe_table = real_query
    total = summary(samples[(DESCRIBE[0], False)])[0]
    constant = summary(samples[(CONSTANT[0], False)])[0]
    tool_ms, query_ms = in_tool.median(RUNS), in_query.median(RUNS)
    split = (
        f"in-process describe_table(film), medians: whole call {total:.2f} ms = tool function "
        f"{tool_ms:.2f} ms (the catalog statement {query_ms:.2f} ms; the rest is pool "
        f"checkout + pre-ping, BEGIN, ROLLBACK, pydantic) + SDK; bench_constant's whole call "
        f"{constant:.2f} ms"
    )
    return row("in-process (no transport), validation off", samples, False, judged=False), split


async def profile_describe(dsn: str, tmp: Path) -> str:
    """Profile PROFILED_CALLS describe_table calls in both processes (validation off)."""
    server_profile = tmp / "server.prof"
    client = cProfile.Profile()
    with (tmp / "server-profiled-stderr.log").open("w") as errlog:
        async with Client(stdio_client(server_params(dsn, server_profile), errlog=errlog)) as c:
            for _ in range(WARMUP):
                await call(c, DESCRIBE)
            await call(c, ("bench_profile", {"action": "start"}))
            client.enable()
            for _ in range(PROFILED_CALLS):
                await call(c, DESCRIBE)
            client.disable()
            await call(c, ("bench_profile", {"action": "stop"}))
    return "\n".join(
        [
            f"### server process ({PROFILED_CALLS} calls)",
            top_functions(str(server_profile)),
            f"### client process ({PROFILED_CALLS} calls)",
            top_functions(client, cumulative=False),
        ]
    )


async def bench(dsn: str, tmp: Path) -> tuple[list[str], str, str | None]:
    with (tmp / "server-stderr.log").open("w") as errlog:
        async with Client(stdio_client(server_params(dsn), errlog=errlog)) as client:
            film = await call(client, DESCRIBE)
            body = film.structured_content or {}
            parts = ", ".join(f"{len(body[k])} {k}" for k in ("columns", "indexes", "constraints"))
            text = film.content[0].text if film.content[0].type == "text" else ""
            print(f"describe_table(film): {parts}; result text {len(text):,} characters")
            samples = await interleaved(client, (True, False))
    rows = [
        row("stdio, client validates output (default)", samples, True),
        row("stdio, client validation off", samples, False),
    ]
    with client_validation(False):
        in_process_row, split = await in_process(dsn)
        rows.append(in_process_row)
        missed = ratio(samples, False) > TARGET_RATIO
        profiled = await profile_describe(dsn, tmp) if missed else None
    return rows, split, profiled


def main() -> None:
    with embedded_server() as pg, tempfile.TemporaryDirectory() as tmp:
        dsn = asyncio.run(create_database(pg, "pagila"))
        print(f"Pagila loaded in {load_pagila(dsn):.1f} s", flush=True)
        load_before = os.getloadavg()[0]
        rows, split, profiled = asyncio.run(bench(dsn, Path(tmp)))
        load_after = os.getloadavg()[0]
    if profiled:
        print(f"\ndescribe_table missed {TARGET_RATIO}x over stdio; cProfile:\n\n{profiled}")
    print(f"\n{WARMUP} warm-up then {RUNS} timed calls of each tool and client setting,")
    print(f"interleaved. 1-minute load average {load_before:.2f} before, {load_after:.2f} after.\n")
    print("| phase | describe_table(film) median / p95 (ms) | bench_constant median / p95 (ms) "
          f"| ratio of medians | <= {TARGET_RATIO}x |")  # fmt: skip
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    print(f"\n{split}")


if __name__ == "__main__":
    main()

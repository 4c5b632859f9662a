"""describe_table(film) and execute_query("SELECT 1") versus a constant tool, over real stdio,
on one server process.

Starts a throwaway PostgreSQL 18, loads Pagila (../shared/datasets/pagila, with /usr/bin/psql)
and VACUUM ANALYZEs it, spawns bench/stdio_server.py (our server plus `bench_constant`) with
`mcp.Client(stdio_client(...))`, and times each tool in three patterns:
- interleaved: each iteration calls constant, describe, execute (and the reference below),
  then the same again: first with the client's default output-schema validation
  (jsonschema), then with it switched off (ClientSession.validate_tool_result -> no-op), so
  all calls see the same machine state; a call can overlap the background session reset of
  the call before it;
- per-tool blocks: rounds of 20 back-to-back calls of one tool and setting, so a tool shares
  the machine only with its own background work;
- spaced: interleaved with validation off and 5 ms of idle time before each call, the way an
  agent calls tools (slower for all: waking idle CPUs costs, and the database adds hops).
A fourth tool, bench_one_round_trip, is timed alongside as a reference: one `SELECT 1` round
trip on a connection of its own (no pool, guard, transaction or reset) with an answer shaped
like execute_query's, the least any database-backed tool can do. The server's stderr goes to
a temporary file. Targets: describe_table within 1.5x the constant tool (issue 2),
execute_query("SELECT 1") within 1.3x (issue 4).

For reference the same server is then timed in-process (`mcp.Client(server)`, no transport),
with stopwatches splitting each tool's time server-side, and the first execute_query of a fresh
server (which loads the guard's safety catalog, again every 60 s) is timed. If a tool misses
its target over stdio, a second server runs under cProfile for PROFILED_CALLS calls of it
(validation off) while the client side is profiled too, and the top functions are printed.

Run: uv run python bench/bench_stdio.py
"""

from __future__ import annotations

import asyncio
import cProfile
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchlib import (
    Stopwatch,
    count_round_trips,
    create_database,
    embedded_server,
    load_pagila,
    ms_since,
    patched,
    summary,
    top_functions,
)
from mcp import Client, StdioServerParameters
from mcp.client.session import ClientSession
from mcp.client.stdio import stdio_client
from mcp_types import CallToolResult
from stdio_server import bench_server

from pg_mcp_server.config import Settings
from pg_mcp_server.database import catalog, guard
from pg_mcp_server.tools import query_tools

WARMUP = 20
RUNS = 200
BLOCK_ROUNDS = 10  # blocks(): 10 rounds x 20 kept calls = RUNS per tool and setting
BLOCK_WARMUP = 2
BLOCK_CALLS = 20
GAP_S = 0.005  # idle time before each call in the spaced-out pattern
PROFILED_CALLS = 200
FIRST_CALL_RUNS = 5
COUNTED_CALLS = 10

ROOT = Path(__file__).resolve().parents[1]

Tool = tuple[str, dict[str, Any]]
DESCRIBE: Tool = ("describe_table", {"table_name": "film"})
EXECUTE: Tool = ("execute_query", {"sql": "SELECT 1"})
CONSTANT: Tool = ("bench_constant", {})
# The least a database-backed tool can do (see stdio_server.py): a reference, not a target.
ROUND_TRIP: Tool = ("bench_one_round_trip", {"sql": "SELECT 1"})
TOOLS = (CONSTANT, DESCRIBE, EXECUTE, ROUND_TRIP)
TARGETS = {DESCRIBE[0]: 1.5, EXECUTE[0]: 1.3}  # most time relative to the constant tool
Samples = dict[tuple[str, bool], list[float]]  # (tool name, client validates) -> ms


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


async def timed(client: Client, tool: Tool, validate: bool, gap_s: float = 0.0) -> float:
    if gap_s:
        await asyncio.sleep(gap_s)
    with client_validation(validate):
        start = time.perf_counter_ns()
        await call(client, tool)
        return ms_since(start)


async def interleaved(client: Client, validation: tuple[bool, ...], gap_s: float = 0.0) -> Samples:
    """Each iteration calls every tool once per client setting, in TOOLS order (so a tool's
    call can overlap the background reset of the tool called before it); `gap_s` of idle
    time before each call."""
    samples: Samples = {(t[0], v): [] for t in TOOLS for v in validation}
    for i in range(WARMUP + RUNS):
        for validate in validation:
            for tool in TOOLS:
                elapsed = await timed(client, tool, validate, gap_s)
                if i >= WARMUP:
                    samples[(tool[0], validate)].append(elapsed)
    return samples


async def blocks(client: Client, validation: tuple[bool, ...]) -> Samples:
    """BLOCK_ROUNDS rounds; in each, every tool and client setting gets a block of
    BLOCK_WARMUP + BLOCK_CALLS back-to-back calls (the first BLOCK_WARMUP not kept): a tool
    shares the machine only with its own background work, and the rounds spread all tools
    over the same stretch of time."""
    samples: Samples = {(t[0], v): [] for t in TOOLS for v in validation}
    for _ in range(BLOCK_ROUNDS):
        for validate in validation:
            for tool in TOOLS:
                for i in range(BLOCK_WARMUP + BLOCK_CALLS):
                    elapsed = await timed(client, tool, validate)
                    if i >= BLOCK_WARMUP:
                        samples[(tool[0], validate)].append(elapsed)
    return samples


def ratio(samples: Samples, tool: str, validate: bool) -> float:
    return summary(samples[(tool, validate)])[0] / summary(samples[(CONSTANT[0], validate)])[0]


def row(phase: str, samples: Samples, validate: bool, judged: bool = True) -> str:
    """A table row; `judged` rows are held to TARGETS (the stdio ones)."""
    cells = [phase]
    for tool in (DESCRIBE[0], EXECUTE[0], CONSTANT[0], ROUND_TRIP[0]):
        median, p95 = summary(samples[(tool, validate)])
        cells.append(f"{median:.2f} / {p95:.2f}")
    cells.append(f"{ratio(samples, ROUND_TRIP[0], validate):.2f}x")
    for tool, target in TARGETS.items():
        r = ratio(samples, tool, validate)
        cells.append(f"{r:.2f}x")
        cells.append(("yes" if r <= target else "NO") if judged else "(reference)")
    return "| " + " | ".join(cells) + " |"


def server_params(dsn: str, profile_to: Path | None = None) -> StdioServerParameters:
    args = [str(Path(__file__).with_name("stdio_server.py")), "--dsn", dsn]
    if profile_to:
        args += ["--profile", str(profile_to)]
    return StdioServerParameters(command=sys.executable, args=args, cwd=ROOT)


async def in_process(dsn: str) -> tuple[str, list[str]]:
    """The same server without transport (validation off), splitting each tool's time.

    Stopwatches around the tool functions (reached through the SDK's private tool manager),
    catalog.describe_table (the one catalog statement), run_query (guard, prepare, BEGIN and
    Bind/Execute in one flight, rows to JSON) and SqlGuard.check (names kept for repeated SQL;
    the safety catalog is cached).
    """
    server = bench_server(Settings.load(database={"dsn": dsn}))
    watches = {name: Stopwatch() for name in ("describe", "execute", "catalog", "run", "guard")}
    for name, tool_name in (("describe", DESCRIBE[0]), ("execute", EXECUTE[0])):
        tool = server._tool_manager.get_tool(tool_name)  # private; bench only
        assert tool is not None
        tool.fn = watches[name].wrap(tool.fn)
    with (
        patched(catalog, "describe_table", watches["catalog"].wrap),
        patched(query_tools, "run_query", watches["run"].wrap),
        patched(guard.SqlGuard, "check", watches["guard"].wrap),
    ):
        async with Client(server) as client:
            samples = await interleaved(client, (False,))
    median = {name: w.median(RUNS) for name, w in watches.items()}
    whole = {t[0]: summary(samples[(t[0], False)])[0] for t in TOOLS}
    split = [
        f"- describe_table(film): whole call {whole[DESCRIBE[0]]:.2f} ms; tool function "
        f"{median['describe']:.2f} ms, of which the catalog statement {median['catalog']:.2f} ms "
        "(the rest: pool checkout, pydantic)",
        f"- execute_query(SELECT 1): whole call {whole[EXECUTE[0]]:.2f} ms; tool function "
        f"{median['execute']:.2f} ms, of which run_query {median['run']:.2f} ms (guard "
        f"{median['guard']:.2f} ms, then BEGIN + Bind/Execute in one flight + rows to JSON); "
        "the rest: pool checkout, pydantic",
        f"- bench_constant: whole call {whole[CONSTANT[0]]:.2f} ms",
    ]
    for measured in (DESCRIBE, EXECUTE):
        split.append(await round_trips(dsn, measured))
    return row("in-process (no transport), validation off", samples, False, judged=False), split


async def round_trips(dsn: str, tool: Tool) -> str:
    """Wire round trips per call of `tool` on a fresh in-process server (see benchlib)."""

    async def one(client: Client) -> None:
        await call(client, tool)

    counts = await count_round_trips(
        dsn,
        bench_server(Settings.load(database={"dsn": dsn})),
        one,
        {"CATALOG DESCRIBE_TABLE": (catalog.DESCRIBE_TABLE, ())},
        warmup=WARMUP,
        counted=COUNTED_CALLS,
        pgss=False,
    )
    return (
        f"- {tool[0]}: {counts.round_trips(False):g} wire round trips per call on the "
        f"critical path + {counts.round_trips(True):g} in the background: {counts.wire_detail()}"
    )


async def first_execute(dsn: str) -> str:
    """execute_query on a fresh server, after list_schemas has opened the connection: the
    guard loads its safety catalog (and reloads it on the first call after 60 s)."""
    first: list[float] = []
    second: list[float] = []
    for _ in range(FIRST_CALL_RUNS):
        async with Client(bench_server(Settings.load(database={"dsn": dsn}))) as client:
            await call(client, ("list_schemas", {}))
            await asyncio.sleep(0.05)  # the release runs in the background
            for samples in (first, second):
                start = time.perf_counter_ns()
                await call(client, EXECUTE)
                samples.append(ms_since(start))
    return (
        f"- execute_query(SELECT 1), first call of a fresh server (safety catalog load): median "
        f"{summary(first)[0]:.1f} ms over {FIRST_CALL_RUNS} servers; the second call "
        f"{summary(second)[0]:.2f} ms"
    )


async def profile_tool(dsn: str, tmp: Path, tool: Tool) -> str:
    """Profile PROFILED_CALLS calls of `tool` in both processes (validation off)."""
    server_profile = tmp / f"server-{tool[0]}.prof"
    client = cProfile.Profile()
    with (tmp / "server-profiled-stderr.log").open("w") as errlog:
        async with Client(stdio_client(server_params(dsn, server_profile), errlog=errlog)) as c:
            for _ in range(WARMUP):
                await call(c, tool)
            await call(c, ("bench_profile", {"action": "start"}))
            client.enable()
            for _ in range(PROFILED_CALLS):
                await call(c, tool)
            client.disable()
            await call(c, ("bench_profile", {"action": "stop"}))
    return "\n".join(
        [
            f"### {tool[0]}: server process ({PROFILED_CALLS} calls)",
            top_functions(str(server_profile)),
            f"### {tool[0]}: client process ({PROFILED_CALLS} calls)",
            top_functions(client, cumulative=False),
        ]
    )


async def bench(dsn: str, tmp: Path) -> tuple[list[str], list[str], list[str]]:
    with (tmp / "server-stderr.log").open("w") as errlog:
        async with Client(stdio_client(server_params(dsn), errlog=errlog)) as client:
            film = await call(client, DESCRIBE)
            body = film.structured_content or {}
            parts = ", ".join(f"{len(body[k])} {k}" for k in ("columns", "indexes", "constraints"))
            text = film.content[0].text if film.content[0].type == "text" else ""
            print(f"describe_table(film): {parts}; result text {len(text):,} characters")
            one = await call(client, EXECUTE)
            print(f"execute_query(SELECT 1): {one.structured_content}")
            samples = await interleaved(client, (True, False))
            in_blocks = await blocks(client, (True, False))
            spaced = await interleaved(client, (False,), GAP_S)
    rows = [
        row("stdio, interleaved, client validates output (default)", samples, True),
        row("stdio, interleaved, client validation off", samples, False),
        row("stdio, per-tool blocks, client validates output (default)", in_blocks, True),
        row("stdio, per-tool blocks, client validation off", in_blocks, False),
        row(
            f"stdio, spaced ({GAP_S * 1000:g} ms idle before each call), validation off",
            spaced,
            False,
        ),
    ]
    profiles = []
    with client_validation(False):
        in_process_row, split = await in_process(dsn)
        rows.append(in_process_row)
        split.append(await first_execute(dsn))
        for tool in (DESCRIBE, EXECUTE):
            if ratio(samples, tool[0], False) > TARGETS[tool[0]]:
                profiles.append(await profile_tool(dsn, tmp, tool))
    return rows, split, profiles


def main() -> None:
    with embedded_server() as pg, tempfile.TemporaryDirectory() as tmp:
        dsn = asyncio.run(create_database(pg, "pagila"))
        print(f"Pagila loaded in {load_pagila(dsn):.1f} s", flush=True)
        load_before = os.getloadavg()[0]
        rows, split, profiles = asyncio.run(bench(dsn, Path(tmp)))
        load_after = os.getloadavg()[0]
    for profiled in profiles:
        print(f"\nTarget missed over stdio (validation off); cProfile:\n\n{profiled}")
    print(f"\nInterleaved: {WARMUP} warm-up then {RUNS} timed calls of each tool and client")
    print(f"setting. Blocks: {BLOCK_ROUNDS} rounds of {BLOCK_WARMUP} + {BLOCK_CALLS} calls per")
    print("tool and setting. 1-minute load average")
    print(f"{load_before:.2f} before, {load_after:.2f} after.\n")
    print("| phase | describe_table(film) median / p95 (ms) "
          "| execute_query(SELECT 1) median / p95 (ms) | bench_constant median / p95 (ms) "
          "| one round trip median / p95 (ms) | one round trip / constant "
          "| describe / constant | <= 1.5x | execute / constant | <= 1.3x |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print("\nIn-process medians:\n")
    print("\n".join(split))


if __name__ == "__main__":
    main()

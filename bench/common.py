"""Shared by the bench scripts: calls, timing, peak memory, and what a run ran on."""

from __future__ import annotations

import lzma
import os
import statistics
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from mcp import Client
from mcp_types import CallToolRequest, CallToolRequestParams, CallToolResult

ROOT = Path(__file__).resolve().parents[1]
PAGILA = ROOT / "tests" / "datasets" / "pagila"  # the tests' copy, xz-compressed
# The embedded PostgreSQL's role is its superuser, which a server refuses unless allowed.
SUPERUSER_OK = {"allow_privileged_role": True}


def load_pagila(dsn: str) -> None:
    """Pagila's schema and data through psql, then VACUUM ANALYZE."""
    script = b"\n".join(
        lzma.decompress((PAGILA / f).read_bytes())
        for f in ("pagila-schema.sql.xz", "pagila-data.sql.xz")
    )
    subprocess.run(
        ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-f", "-", "-c", "VACUUM ANALYZE"],
        input=script, check=True, stdout=subprocess.DEVNULL, timeout=300,
    )  # fmt: skip


def summary(samples_ms: list[float]) -> str:
    """'median / p95' in ms; p95 by the nearest-rank method."""
    ordered = sorted(samples_ms)
    p95 = ordered[max(0, round(0.95 * len(ordered)) - 1)]
    return f"{statistics.median(ordered):.1f} / {p95:.1f}"


async def timed(
    call: Callable[[], Awaitable[Any]], *, warmup: int, runs: int, budget_s: float
) -> tuple[float, list[float]]:
    """The first call's ms, then `warmup` untimed calls and up to `runs` timed ones (ms). The
    timed loop stops once it has taken `budget_s`, after at least three calls."""
    start = time.perf_counter_ns()
    await call()
    first = (time.perf_counter_ns() - start) / 1e6
    for _ in range(warmup):
        await call()
    samples: list[float] = []
    deadline = time.monotonic() + budget_s
    while len(samples) < runs and (len(samples) < 3 or time.monotonic() < deadline):
        start = time.perf_counter_ns()
        await call()
        samples.append((time.perf_counter_ns() - start) / 1e6)
    return first, samples


async def call_tool(client: Client, name: str, arguments: dict[str, Any]) -> CallToolResult:
    """tools/call through the session's public send_request, which skips the client's check of
    the result against the tool's output schema (`Client.call_tool` runs it): what the server
    spends. That check costs the client as much again for a large answer."""
    request = CallToolRequest(params=CallToolRequestParams(name=name, arguments=arguments))
    return await client.session.send_request(request, CallToolResult)


def vmhwm_mib() -> float:
    """This process's peak resident set size (the kernel's VmHWM), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def header() -> str:
    """The commit measured (with '+dirty' for uncommitted changes in src/) and the load."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False
        ).stdout.strip()

    dirty = "+dirty" if git("status", "--porcelain", "src") else ""
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"commit {git('rev-parse', '--short', 'HEAD')}{dirty}, load average {load}"


async def made_database(pg: Any, name: str, setup: str) -> str:
    """A database `name` of the embedded server `pg` (an EmbeddedPostgres), made with `setup`."""
    import asyncpg

    dsn: str = pg.create_database(name)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(setup)
    finally:
        await conn.close()
    return dsn

"""Custom definitions: the cost of a large definitions file at start (and each reload) in its
three steps (load, check against the database, build), and a custom sql tool call next to
execute_query running the same statement (in-process client, interleaved). Nothing is
patched; the machine is shared: expect noise. Run: uv run python bench/bench_custom.py"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from benchlib import create_database, embedded_server, ms_since, summary
from mcp import Client
from mcp_types import CallToolResult

from pg_mcp_server.config import Settings
from pg_mcp_server.custom.build import build
from pg_mcp_server.custom.check import check
from pg_mcp_server.custom.loader import load
from pg_mcp_server.database.engine import Database
from pg_mcp_server.demo import load_demo
from pg_mcp_server.server import build_server, reserved

TOOLS, RESOURCES, PROMPTS = 200, 50, 50
ROUNDS = 5
CALLS = 400
SQL = "SELECT id, email FROM users WHERE id = $1"


def definitions() -> str:
    lines = ["tools:"]
    for i in range(TOOLS):
        lines += [
            f"  - {{name: user_{i}, type: sql,",
            "     input_schema: {type: object, properties: {id: {type: integer}}},",
            f"     sql: 'SELECT id, email, {i} AS n FROM users WHERE id = $1'}}",
        ]
    lines.append("resources:")
    for i in range(RESOURCES):
        lines += [
            f"  - {{uri: 'custom://orders-{i}', name: Orders {i}, type: sql,",
            f"     sql: 'SELECT status, count(*) + {i} AS n FROM orders GROUP BY status'}}",
        ]
    lines.append("prompts:")
    for i in range(PROMPTS):
        lines += [
            f"  - {{name: prompt-{i}, arguments: [{{name: who, required: true}}],",
            "     messages: [{role: user, content: {type: text, text: 'Hello {{who}}'}}]}",
        ]
    return "\n".join(lines) + "\n"


async def start_cost(dsn: str, path: str) -> None:
    settings = Settings.load(database={"dsn": dsn}, server={"custom_definitions": path})
    taken: dict[str, list[float]] = {"load": [], "check": [], "build": []}
    db = Database(settings.database)
    try:
        for _ in range(ROUNDS):
            start = time.perf_counter_ns()
            defs = load(path, settings.server, reserved(settings))
            taken["load"].append(ms_since(start))
            start = time.perf_counter_ns()
            described = await check(defs, db)
            taken["check"].append(ms_since(start))
            start = time.perf_counter_ns()
            build(defs, described, settings)
            taken["build"].append(ms_since(start))
    finally:
        await db.dispose()
    print(f"start, {TOOLS} tools + {RESOURCES} resources + {PROMPTS} prompts ({ROUNDS} runs):")
    for step, samples in taken.items():
        median, p95 = summary(samples)
        print(f"  {step:6} median {median:7.1f} ms   p95 {p95:7.1f} ms")


async def call_cost(dsn: str, directory: Path) -> None:
    path = directory / "one.yaml"
    path.write_text(
        "tools:\n  - name: user_by_id\n    type: sql\n"
        "    input_schema: {type: object, properties: {id: {type: integer}}}\n"
        f"    sql: {SQL}\n"
    )
    settings = Settings.load(database={"dsn": dsn}, server={"custom_definitions": str(path)})
    samples: dict[str, list[float]] = {"custom tool": [], "execute_query": []}
    async with Client(build_server(settings)) as client:
        calls: dict[str, Callable[[int], Awaitable[CallToolResult]]] = {
            "custom tool": lambda n: client.call_tool("user_by_id", {"id": n}),
            "execute_query": lambda n: client.call_tool(
                "execute_query", {"sql": SQL, "params": [n]}
            ),
        }
        for n in range(CALLS + 50):
            for name, call in calls.items():
                start = time.perf_counter_ns()
                result = await call(1 + n % 100)
                if n >= 50:  # the first 50 warm up
                    samples[name].append(ms_since(start))
                assert not result.is_error, result
    print(f"calls ({CALLS} each, interleaved, in-process client):")
    for name, taken in samples.items():
        median, p95 = summary(taken)
        print(f"  {name:14} median {median:6.2f} ms   p95 {p95:6.2f} ms")


async def main(dsn: str) -> None:
    await load_demo(dsn)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "defs.yaml"
        path.write_text(definitions())
        await start_cost(dsn, str(path))
        await call_cost(dsn, Path(directory))


if __name__ == "__main__":
    print(f"load average: {os.getloadavg()}")
    with embedded_server() as pg:
        asyncio.run(main(asyncio.run(create_database(pg, "demo"))))

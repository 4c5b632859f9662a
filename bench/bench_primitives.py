"""Issue 11's performance targets on the 10,000-table catalog (catalog.py's `big` variant: one
schema of 10,000 tables, 100,000 columns, 20,000 foreign keys):

- resources/list stays under 10 KB (and the template and prompt lists are as small);
- a table template read (pg://schemas/big/tables/{table}) costs what describe_table costs:
  the same statements (pg_stat_statements), and the same time over stdio;
- a completion of {table} over the 10,000 tables answers in at most 20 ms server-side
  (in-process client: the SDK's dispatch and our handler, no transport), for prefixes matching
  all 10,000 tables down to none, timed round-robin so every prefix runs on the plan the
  prepared statement has settled on; with the statement alone, the plans it gets, and the
  plain scan of pg_class it replaces, for comparison.

Nothing is patched: statements are counted by PostgreSQL (pg_stat_statements, preloaded).
The machine is shared: each run prints the load average; expect noise.

Run: uv run python bench/bench_primitives.py   (~2 minutes, most of it building the catalog)
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg
from benchlib import embedded_server, ms_since, summary
from catalog import BIG, SERVER_SETTINGS, build
from mcp import Client
from mcp_types import ResourceTemplateReference

from pg_mcp_server.config import Settings
from pg_mcp_server.database import names
from pg_mcp_server.embedded import EmbeddedPostgres
from pg_mcp_server.server import build_server

SETTINGS = SERVER_SETTINGS | {"shared_preload_libraries": "pg_stat_statements"}
TABLE = "t5000"
RUNS = 200
COUNTED = 50
COMPLETE_ROUNDS = 60
# (prefix, what it matches in schema `big` of t0000..t9999)
PREFIXES = [
    ("", "all 10,000"),
    ("t", "all 10,000"),
    ("T1", "1,000"),
    ("t12", "100"),
    ("T123", "10"),
    ("t1234", "1"),
    ("zz", "none"),
]
INIT = {
    "protocolVersion": "2025-11-25",
    "capabilities": {},
    "clientInfo": {"name": "bench", "version": "1"},
}
TEMPLATE = ResourceTemplateReference(uri="pg://schemas/{schema}/tables/{table}")

# What a completion would cost without the index: one pass over pg_class.
SCAN = """
SELECT c.relname::text, pg_catalog.count(*) OVER ()::int
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'f', 'v', 'm') AND NOT c.relispartition
  AND c.relname::text ILIKE $2
ORDER BY c.relname LIMIT 100
"""


def jbytes(model: Any) -> int:
    return len(model.model_dump_json(by_alias=True, exclude_none=True))


def fmt(samples: list[float]) -> str:
    median, p95 = summary(samples)
    return f"{median:.2f} / {p95:.2f}"


async def over_stdio(
    dsn: str, requests: dict[str, tuple[str, dict[str, Any]]]
) -> dict[str, list[float]]:
    """`pg-mcp-server --dsn` spoken to in JSON-RPC lines, the requests taking turns: the
    server's whole cost plus the same pipe for each, without a client SDK (whose validation of
    tool results against their output schema would weigh on one side only)."""
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "pg-mcp-server"),
        *("--dsn", dsn, "--log-level", "ERROR"),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    stdin, stdout = proc.stdin, proc.stdout
    assert stdin and stdout
    ids = iter(range(1, 1_000_000))

    async def send(method: str, params: dict[str, Any]) -> None:
        message = {"jsonrpc": "2.0", "id": next(ids), "method": method, "params": params}
        stdin.write(json.dumps(message).encode() + b"\n")
        answer = json.loads(await stdout.readline())
        assert "result" in answer and not answer["result"].get("isError"), answer

    await send("initialize", INIT)
    stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    samples: dict[str, list[float]] = {label: [] for label in requests}
    for run in range(20 + RUNS):
        for label, (method, params) in requests.items():
            start = time.perf_counter_ns()
            await send(method, params)
            if run >= 20:  # the first 20 warm up
                samples[label].append(ms_since(start))
    stdin.close()
    await proc.wait()
    return samples


async def statements_per_call(admin: asyncpg.Connection, client: Client, fn: Any) -> str:
    """pg_stat_statements calls per call of `fn`, COUNTED calls after a reset (the release's
    background reset included: it settles before the count is read)."""
    await asyncio.sleep(0.2)
    await admin.execute("SELECT pg_stat_statements_reset()")
    for _ in range(COUNTED):
        await fn()
    await asyncio.sleep(0.2)
    rows = await admin.fetch(
        "SELECT query, calls FROM pg_stat_statements WHERE query !~ 'pg_stat_statements' "
        "AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
        "ORDER BY calls DESC, query"
    )
    total = sum(r["calls"] for r in rows) / COUNTED
    detail = "; ".join(
        f"{r['calls'] / COUNTED:g} x {' '.join(r['query'].split())[:40]!r}" for r in rows
    )
    return f"{total:g} statements per call ({detail})"


async def plan_nodes(conn: asyncpg.Connection, prefix: str) -> str:
    plan = await conn.fetchval(
        "EXPLAIN (ANALYZE, FORMAT JSON) " + names.TABLE_NAMES,
        *names.table_name_binds("big", prefix),
    )
    found: dict[str, int] = {}

    def visit(node: dict[str, Any]) -> None:
        if node.get("Relation Name") == "pg_class":  # the scans of pg_class, by kind
            found[node["Node Type"]] = found.get(node["Node Type"], 0) + 1
        for child in node.get("Plans", []):
            visit(child)

    top = (json.loads(plan) if isinstance(plan, str) else plan)[0]
    visit(top["Plan"])
    nodes = ", ".join(f"{n} x {k}" for k, n in found.items())
    return f"{nodes}; {top['Execution Time']:.2f} ms"


async def run(dsn: str) -> None:
    admin = await asyncpg.connect(dsn)
    await admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    load_before = os.getloadavg()[0]
    print("\n## Lists (bytes of the JSON result)\n")
    async with Client(build_server(Settings.load(database={"dsn": dsn}))) as client:
        print(f"- resources/list: {jbytes(await client.list_resources())} bytes")
        print(f"- resources/templates/list: {jbytes(await client.list_resource_templates())} bytes")
        print(f"- prompts/list: {jbytes(await client.list_prompts())} bytes")

        uri = f"pg://schemas/big/tables/{TABLE}"
        args = {"table_name": TABLE, "schema_name": "big"}

        async def read() -> None:
            await client.read_resource(uri, cache_mode="bypass")

        async def describe() -> None:
            await client.call_tool("describe_table", args)

        await read()
        print(f"\n## {uri} vs describe_table({TABLE})\n")
        print(f"- template read: {await statements_per_call(admin, client, read)}")
        print(f"- describe_table: {await statements_per_call(admin, client, describe)}")
        times = await over_stdio(
            dsn,
            {
                "template read": ("resources/read", {"uri": uri}),
                "describe_table": ("tools/call", {"name": "describe_table", "arguments": args}),
            },
        )
        print("- over stdio (JSON-RPC lines, no client SDK), median / p95 ms: ", end="")
        print(", ".join(f"{label} {fmt(samples)}" for label, samples in times.items()))

        print("\n## completion/complete of {table} in schema big (10,000 tables), ms\n")
        samples: dict[str, list[float]] = {p: [] for p, _ in PREFIXES}
        answers: dict[str, Any] = {}
        for _ in range(COMPLETE_ROUNDS):
            for prefix, _ in PREFIXES:
                start = time.perf_counter_ns()
                result = await client.complete(
                    TEMPLATE, {"name": "table", "value": prefix}, {"schema": "big"}
                )
                samples[prefix].append(ms_since(start))
                answers[prefix] = result.completion
        raw: dict[str, list[float]] = {p: [] for p, _ in PREFIXES}
        scan: dict[str, list[float]] = {p: [] for p, _ in PREFIXES}
        conn = await asyncpg.connect(dsn)
        one: list[float] = []
        for _ in range(RUNS):
            start = time.perf_counter_ns()
            await conn.fetchval("SELECT 1")
            one.append(ms_since(start))
        for _ in range(COMPLETE_ROUNDS):
            for prefix, _ in PREFIXES:
                start = time.perf_counter_ns()
                await names.table_names(conn, "big", prefix)
                raw[prefix].append(ms_since(start))
                start = time.perf_counter_ns()
                await conn.fetch(SCAN, "big", names.like_prefix(prefix))
                scan[prefix].append(ms_since(start))
        print(
            "| prefix | matches | values / total / hasMore | in-process completion "
            "median / p95 | the statement alone | its pg_class scans (EXPLAIN ANALYZE) "
            "| a plain scan of pg_class instead |"
        )
        print("|---|---|---|---|---|---|---|")
        for prefix, matches in PREFIXES:
            c = answers[prefix]
            plan = await plan_nodes(conn, prefix)
            print(
                f"| `{prefix!r}` | {matches} | {len(c.values)} / {c.total} / {c.has_more} "
                f"| {fmt(samples[prefix])} | {fmt(raw[prefix])} | {plan} | {fmt(scan[prefix])} |"
            )
        print(f"\nFor scale: `SELECT 1` on the same connection, median / p95 {fmt(one)} ms.")
        await conn.close()
    await admin.close()
    print(f"\n1-minute load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after.")


async def build_and_run(pg: EmbeddedPostgres) -> None:
    await run(await build(pg, BIG))


def main() -> None:
    with embedded_server(SETTINGS) as pg:  # outside the loop: it restarts the server
        asyncio.run(build_and_run(pg))


if __name__ == "__main__":
    main()

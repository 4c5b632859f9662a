"""Tool calls on the two 10,000-table catalogs of catalog.py, server side.

Builds both catalogs on a throwaway PostgreSQL 18, then for each case opens a fresh
`mcp.Client(build_server(settings))` in process (no transport, and without the client's check
of each result against the output schema: common.call_tool) and times its first call (cold:
empty caches, new pool), then WARMUP untimed and up to RUNS timed calls (median / p95, ms).

Run: uv run python bench/bench_catalog.py   (~5 min, 3 of them building the catalogs)
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from catalog import BIG, SPREAD, build
from common import SUPERUSER_OK, call_tool, header, summary, timed
from mcp import Client
from mcp_types import CallToolResult, CompleteResult, ResourceTemplateReference

from pg_mcp_server.config import Settings
from pg_mcp_server.embedded import EmbeddedPostgres
from pg_mcp_server.server import build_server

WARMUP = 3
RUNS = 30
BUDGET_S = 20.0
TEMPLATE = ResourceTemplateReference(uri="pg://schemas/{schema}/tables/{table}")
GUARDED = (
    "SELECT a.id, a.name, b.amount FROM s03.t500 a JOIN s03.t499 b ON b.id = a.parent_id "
    "WHERE lower(a.name) LIKE 'x%' AND a.created_at > now() - interval '1 day'"
)

# (label, database, tool name or "complete", arguments)
CASES: list[tuple[str, str, str, dict[str, Any]]] = [
    ("list_tables, 1,000-table schema s03", SPREAD.database, "list_tables",
     {"schema_name": "s03"}),
    ("list_tables, 10,000-table schema, first page (1,000)", BIG.database, "list_tables",
     {"schema_name": "big"}),
    ("list_tables, 10,000-table schema, limit=10000", BIG.database, "list_tables",
     {"schema_name": "big", "limit": 10000}),
    ("list_tables include_columns, 1,000-table schema (page of 100)", SPREAD.database,
     "list_tables", {"schema_name": "s03", "include_columns": True}),
    ("list_tables include_columns, 10,000-table schema (page of 100)", BIG.database,
     "list_tables", {"schema_name": "big", "include_columns": True}),
    ("search_tables 'display name' (every table matches)", SPREAD.database, "search_tables",
     {"query": "display name"}),
    ("search_tables 'zebra' (no match)", SPREAD.database, "search_tables", {"query": "zebra"}),
    ("describe_table s03.t500", SPREAD.database, "describe_table",
     {"schema_name": "s03", "table_name": "t500"}),
    ("find_join_path s08.t700 -> s04.t698 (6 joins, 10 schemas)", SPREAD.database,
     "find_join_path", {"from_schema": "s08", "from_table": "t700", "to_schema": "s04",
                        "to_table": "t698"}),
    ("find_join_path s03.t500 -> s05.t200 (none within 6)", SPREAD.database, "find_join_path",
     {"from_schema": "s03", "from_table": "t500", "to_schema": "s05", "to_table": "t200"}),
    ("completion/complete {table}, schema big, prefix '' (10,000 match)", BIG.database,
     "complete", {"value": ""}),
    ("completion/complete {table}, schema big, prefix 't12' (100 match)", BIG.database,
     "complete", {"value": "t12"}),
    ("execute_query: a join of two tables the guard checks", SPREAD.database, "execute_query",
     {"sql": GUARDED, "limit": 10}),
]  # fmt: skip


def outcome(result: CallToolResult | CompleteResult) -> str:
    if isinstance(result, CompleteResult):
        c = result.completion
        return f"{len(c.values)} values, hasMore {c.has_more}"
    text = "".join(getattr(block, "text", "") for block in result.content)
    return ("ERROR " + text[:120]) if result.is_error else f"{len(text.encode()):,} B of text"


async def run_case(dsn: str, tool: str, arguments: dict[str, Any]) -> str:
    last: list[CallToolResult | CompleteResult] = []
    async with Client(
        build_server(Settings.load(database={"dsn": dsn}, server=SUPERUSER_OK))
    ) as client:
        call: Callable[[], Awaitable[Any]]
        if tool == "complete":

            async def call() -> None:
                last[:] = [await client.complete(TEMPLATE, {"name": "table", **arguments},
                                                 {"schema": "big"})]  # fmt: skip
        else:

            async def call() -> None:
                last[:] = [await call_tool(client, tool, arguments)]

        first, samples = await timed(call, warmup=WARMUP, runs=RUNS, budget_s=BUDGET_S)
    return f"{first:.1f} | {summary(samples)} ({len(samples)}) | {outcome(last[0])}"


async def main(pg: EmbeddedPostgres) -> None:
    dsns = {v.database: await build(pg, v) for v in (SPREAD, BIG)}
    print(f"\n{header()}\n")
    print("| case | first call (ms) | median / p95 ms (timed calls) | answer |\n|---|---|---|---|")
    for label, database, tool, arguments in CASES:
        print(f"| {label} | {await run_case(dsns[database], tool, arguments)} |", flush=True)
    print(f"\n{header()}")


if __name__ == "__main__":
    with EmbeddedPostgres() as server:
        asyncio.run(main(server))

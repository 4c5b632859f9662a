"""The catalog answers of issues 14 and 16 on the 10,000-table catalog (bench/catalog.py).

Starts a throwaway PostgreSQL 18, builds both catalog variants, then times each case two ways:
  - server: the tool's catalog statement alone on a plain asyncpg connection (what PostgreSQL
    spends, plus one local round trip), median and p95 of RUNS after WARMUP;
  - tool: the call through `mcp.Client(server)` in-process, the client validating every
    result against the tool's output schema as it does by default (no patching anywhere).
It also prints the size of each answer's text. Every generated table is empty, so list_tables
stats every table of a page to prove it empty: the worst case for `empty`.

Run: uv run python bench/bench_outputs.py [--existing DSN]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
from benchlib import embedded_server, summary
from catalog import BIG, SERVER_SETTINGS, SPREAD, Variant, build
from mcp import Client

from pg_mcp_server.config import Settings
from pg_mcp_server.database import catalog, search
from pg_mcp_server.embedded import EmbeddedPostgres
from pg_mcp_server.server import build_server

WARMUP = 5
RUNS = 30


@dataclass(frozen=True)
class Case:
    label: str
    variant: Variant
    tool: str
    arguments: dict[str, Any]
    sql: str | None  # the catalog statement, with its binds; None: not one statement
    binds: tuple[Any, ...] = ()


def _list(schema: str, columns: bool = False) -> tuple[str, tuple[Any, ...]]:
    page = 100 if columns else 1000
    return catalog.LIST_TABLES, (schema, catalog.RELKINDS_ALL, None, page, 0, columns)


def _search(query: str) -> tuple[str, tuple[Any, ...]]:
    words = search.search_words(query)
    return search.SEARCH, (words, 10, [f"%{w}%" for w in words])


CASES = [
    Case("list_tables, 1,000-table schema", SPREAD, "list_tables", {"schema_name": "s03"},
         *_list("s03")),
    Case("list_tables, 10,000-table schema, first page", BIG, "list_tables",
         {"schema_name": "big"}, *_list("big")),
    Case("list_tables include_columns (page of 100)", BIG, "list_tables",
         {"schema_name": "big", "include_columns": True}, *_list("big", True)),
    Case("search_tables 'display name' (10 schemas; every table)", SPREAD, "search_tables",
         {"query": "display name"}, *_search("display name")),
    Case("search_tables 't0500 amount' (10 schemas)", SPREAD, "search_tables",
         {"query": "t0500 amount"}, *_search("t0500 amount")),
    Case("search_tables 'zebra' (10 schemas; no match)", SPREAD, "search_tables",
         {"query": "zebra"}, *_search("zebra")),
    Case("search_tables 'generated table payload' (1 schema)", BIG, "search_tables",
         {"query": "generated table payload"}, *_search("generated table payload")),
    Case("describe_table s03.t500", SPREAD, "describe_table",
         {"schema_name": "s03", "table_name": "t500"},
         catalog.DESCRIBE_TABLE, ("s03", "t500", True, True, "")),
    Case("find_join_path s03.t500 -> s05.t200 (default depth)", SPREAD, "find_join_path",
         {"from_schema": "s03", "from_table": "t500", "to_schema": "s05", "to_table": "t200"},
         None),
]  # fmt: skip


async def time_server(dsn: str, case: Case) -> tuple[float, float]:
    conn = await asyncpg.connect(dsn)
    try:
        samples = []
        for n in range(WARMUP + RUNS):
            start = time.perf_counter_ns()
            await conn.fetch(case.sql or "", *case.binds)
            if n >= WARMUP:
                samples.append((time.perf_counter_ns() - start) / 1e6)
    finally:
        await conn.close()
    return summary(samples)


async def time_tool(dsn: str, case: Case) -> tuple[float, float, int, str]:
    async with Client(build_server(Settings.load(database={"dsn": dsn}))) as client:
        samples = []
        for n in range(WARMUP + RUNS):
            start = time.perf_counter_ns()
            result = await client.call_tool(case.tool, case.arguments)
            if n >= WARMUP:
                samples.append((time.perf_counter_ns() - start) / 1e6)
    text = result.content[0].text  # type: ignore[union-attr]
    head = "error" if result.is_error else _gist(case.tool, json.loads(text))
    return (*summary(samples), len(text.encode()), head)


def _gist(tool: str, answer: dict[str, Any]) -> str:
    if tool == "search_tables" and answer["matches"]:
        first = answer["matches"][0]
        return (
            f"{answer['total_count']} matches, first {first['schema_name']}.{first['table_name']}"
        )
    if tool == "search_tables":
        return "no match"
    if tool == "list_tables":
        return f"{len(answer['tables'])} of {answer['total_count']}"
    if tool == "find_join_path":
        path = answer["paths"][0]
        return f"depth {path['depth']}, {answer['paths_found']} paths"
    return ""


async def bench(dsns: dict[str, str]) -> None:
    print(f"\nload average before: {os.getloadavg()[0]:.2f}")
    print("\n| case | server ms (median / p95) | tool ms (median / p95) | text bytes | answer |")
    print("|---|---|---|---|---|")
    for case in CASES:
        dsn = dsns[case.variant.database]
        server = "-"
        if case.sql is not None:
            server = "{:.1f} / {:.1f}".format(*await time_server(dsn, case))
        median, p95, size, head = await time_tool(dsn, case)
        print(f"| {case.label} | {server} | {median:.1f} / {p95:.1f} | {size:,} | {head} |")
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


async def built(pg: EmbeddedPostgres) -> dict[str, str]:
    return {v.database: await build(pg, v) for v in (SPREAD, BIG)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--existing",
        metavar="DSN",
        help="a server that already holds catalog.py's two databases (any database in the DSN)",
    )
    args = parser.parse_args()
    if args.existing:
        existing = urlsplit(args.existing)
        asyncio.run(
            bench(
                {
                    v.database: urlunsplit(existing._replace(path="/" + v.database))
                    for v in (SPREAD, BIG)
                }
            )
        )
        return
    with embedded_server(SERVER_SETTINGS) as pg:
        asyncio.run(bench(asyncio.run(built(pg))))


if __name__ == "__main__":
    main()

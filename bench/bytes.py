"""Bytes a model reads: tools/list per tool, and the text of the answers issue 14 budgets.

Not a timing: sizes are exact and repeatable. Starts a throwaway PostgreSQL with Pagila, or
uses `--dsn` (a database holding Pagila).

Run: uv run python bench/bytes.py [--dsn postgresql://...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from benchlib import create_database, embedded_server, load_pagila
from mcp import Client

from pg_mcp_server.config import Settings
from pg_mcp_server.server import build_server

# (tool, arguments, budget in bytes or None): the calls issue 14 budgets, plus the others.
CALLS: list[tuple[str, dict[str, Any], int | None]] = [
    ("describe_table", {"table_name": "film"}, 2500),
    ("describe_table", {"table_name": "customer"}, 2000),
    ("find_join_path", {"from_table": "payment", "to_table": "category", "max_depth": 5}, 700),
    ("list_tables", {}, 3500),
    ("list_tables", {"include_columns": True}, None),
    ("list_schemas", {}, None),
    ("get_foreign_keys", {"table_name": "film"}, None),
    ("get_sample_rows", {"table_name": "film", "limit": 5}, None),
    ("search_tables", {"query": "customer email"}, None),
]


def _size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


async def measure(dsn: str) -> None:
    settings = Settings.load(database={"dsn": dsn})
    async with Client(build_server(settings)) as client:
        listed = await client.list_tools()
        tools = listed.tools
        print(f"{'tool':<18} {'descr':>6} {'input':>6} {'output':>6} {'total':>6}")
        for tool in tools:
            full = _size(tool.model_dump(mode="json", by_alias=True, exclude_none=True))
            print(
                f"{tool.name:<18} {len((tool.description or '').encode()):>6} "
                f"{_size(tool.input_schema):>6} {_size(tool.output_schema or {}):>6} {full:>6}"
            )
        # The whole result as sent (what tests/test_answers.py holds to the budget).
        total = len(listed.model_dump_json(by_alias=True, exclude_none=True).encode())
        print(f"{'tools/list':<18} {'':>6} {'':>6} {'':>6} {total:>6}  (budget 12288)\n")
        names = {t.name for t in tools}
        for tool_name, arguments, budget in CALLS:
            if tool_name not in names:
                continue
            result = await client.call_tool(tool_name, arguments)
            text = result.content[0].text  # type: ignore[union-attr]
            size = len(text.encode())
            verdict = ""
            if budget is not None:
                verdict = f"  (budget {budget}: {'met' if size <= budget else 'MISSED'})"
            args = ", ".join(f"{k}={v!r}" for k, v in arguments.items())
            print(f"{tool_name}({args}): {size} B{verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn", help="a database holding Pagila (default: start one)")
    args = parser.parse_args()
    if args.dsn:
        asyncio.run(measure(args.dsn))
        return
    with embedded_server() as pg:
        dsn = asyncio.run(create_database(pg, "pagila"))
        load_pagila(dsn)
        asyncio.run(measure(dsn))


if __name__ == "__main__":
    main()

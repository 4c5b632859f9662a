"""The bytes a model reads (issue 14): each budget on Pagila, and answers that are compact.

The facts these answers still carry are checked against pg_catalog in test_schema_tools.py
and test_relationship_tools.py; here: sizes, and that nothing at its default is sent.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from mcp import Client
from mcpclient import call, connect

from pg_mcp_server.models.compact import Compact
from pg_mcp_server.models.relationships import FindJoinPathOutput, GetForeignKeysOutput
from pg_mcp_server.models.schema import (
    DescribeTableOutput,
    GetSampleRowsOutput,
    ListSchemasOutput,
    ListTablesOutput,
    SearchTablesOutput,
)

MODELS: dict[str, type[Compact]] = {
    "list_schemas": ListSchemasOutput,
    "list_tables": ListTablesOutput,
    "search_tables": SearchTablesOutput,
    "describe_table": DescribeTableOutput,
    "get_sample_rows": GetSampleRowsOutput,
    "get_foreign_keys": GetForeignKeysOutput,
    "find_join_path": FindJoinPathOutput,
}

# Text content, in bytes (issue 14, goal 1: 12 KiB for the nine PRD tools; issue 23's
# read_resource, for clients that show tools only, costs 760 bytes more; issue 26's
# generate_embedding and similarity_search 3.6 KiB with their schemas; issue 25's
# analyze_db_health, get_top_queries and analyze_query_indexes 3.1 KB, their check and sort
# names spelled out; issue 23's find_join_path diagram=true 100 bytes).
TOOLS_LIST = 21 * 1024
BUDGETS: list[tuple[str, dict[str, Any], int]] = [
    ("describe_table", {"table_name": "film"}, 2500),
    ("describe_table", {"table_name": "customer"}, 2000),
    ("find_join_path", {"from_table": "payment", "to_table": "category", "max_depth": 5}, 700),
    ("list_tables", {}, 3500),
]


async def text_of(client: Client, tool: str, arguments: dict[str, Any]) -> str:
    await call(client, tool, **arguments)  # succeeds, and its text equals structuredContent
    result = await client.call_tool(tool, arguments)
    text: str = result.content[0].text  # type: ignore[union-attr]
    return text


async def test_tools_list_fits_its_budget(datasets: dict[str, str]) -> None:
    async with connect(datasets["pagila"]) as client:
        listed = await client.list_tools()
    size = len(listed.model_dump_json(by_alias=True, exclude_none=True).encode())
    assert size <= TOOLS_LIST, size
    for tool in listed.tools:
        # Output schemas list their top level only, without prose (tools/schemas.py).
        for prop in (tool.output_schema or {}).get("properties", {}).values():
            assert "description" not in prop and "properties" not in prop.get("items", {})


@pytest.mark.parametrize(("tool", "arguments", "budget"), BUDGETS)
async def test_answer_fits_its_budget(
    datasets: dict[str, str], tool: str, arguments: dict[str, Any], budget: int
) -> None:
    async with connect(datasets["pagila"]) as client:
        text = await text_of(client, tool, arguments)
    assert len(text.encode()) <= budget, len(text.encode())
    assert json.loads(text)  # compact JSON: the same as the structured content


TRUE_BY_DEFAULT = {"is_nullable", "populated"}


def defaults_in(value: Any, path: str = "") -> list[str]:
    """Where `value` holds a null, a false or an empty string: what compact answers leave out
    (but for the fields that are true by default)."""
    if isinstance(value, dict):
        return [
            p
            for k, v in value.items()
            if not (k in TRUE_BY_DEFAULT and v is False)
            for p in defaults_in(v, f"{path}.{k}")
        ]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in defaults_in(v, f"{path}[{i}]")]
    return [path] if value is None or value is False or value == "" else []


@pytest.mark.parametrize("name", ["pagila", "chinook", "northwind", "adventureworks"])
async def test_answers_leave_out_their_defaults(datasets: dict[str, str], name: str) -> None:
    calls: list[tuple[str, dict[str, Any]]] = [
        ("list_schemas", {}),
        ("list_tables", {"include_columns": True}),
        ("search_tables", {"query": "name"}),
    ]
    if name == "pagila":
        calls.append(("find_join_path", {"from_table": "payment", "to_table": "actor"}))
    async with connect(datasets[name]) as client:
        for schema in (await call(client, "list_schemas"))["schemas"]:
            listed = await call(client, "list_tables", schema_name=schema["name"])
            for table in listed["tables"][:10]:
                where = {"table_name": table["name"], "schema_name": schema["name"]}
                calls += [("describe_table", where), ("get_foreign_keys", where)]
                calls.append(("get_sample_rows", {**where, "limit": 1}))
        for tool, arguments in calls:
            out = await call(client, tool, **arguments)
            # Nothing at its default, "NO ACTION", "btree", "table" ... included.
            assert MODELS[tool].model_validate(out).dump() == out, (tool, arguments)
            if tool == "get_sample_rows":
                out = {k: v for k, v in out.items() if k != "rows"}  # data, not defaults
            assert defaults_in(out) == [], (tool, arguments)

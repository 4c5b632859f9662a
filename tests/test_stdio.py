"""The real thing: `pg-mcp-server` spawned as a process, spoken to over stdio."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mcp import Client, StdioServerParameters
from mcpclient import call, call_error

ALL_TOOLS = {
    "list_schemas",
    "list_tables",
    "describe_table",
    "get_sample_rows",
    "get_foreign_keys",
    "find_join_path",
    "execute_query",
    "explain_query",
}
EXECUTABLE = str(Path(sys.executable).parent / "pg-mcp-server")


def params(*args: str) -> StdioServerParameters:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG_", "MCP_"))}
    env.pop("DATABASE_URL", None)
    return StdioServerParameters(command=EXECUTABLE, args=list(args), env=env)


async def test_stdio_session_against_a_database(demo_dsn: str) -> None:
    async with Client(params("--dsn", demo_dsn, "--log-format", "text")) as client:
        assert client.server_info is not None
        assert client.server_info.name == "pg-mcp-server"
        assert client.instructions and "read-only" in client.instructions
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == ALL_TOOLS
        for tool in tools.values():
            assert tool.output_schema is not None
            assert tool.annotations is not None and tool.annotations.read_only_hint
            assert tool.title and "Example" in (tool.description or "")
        listed = await call(client, "list_tables")
        assert {"users", "orders", "order_items", "payments", "addresses"} <= {
            t["name"] for t in listed["tables"]
        }
        body = await call_error(client, "describe_table", table_name="order")
        assert body["error"]["code"] == "TABLE_NOT_FOUND"
        assert "'orders'" in body["error"]["suggestion"]


async def test_demo_mode_over_stdio() -> None:
    async with Client(params("--demo")) as client:
        tools = (await client.list_tools()).tools
        assert {t.name for t in tools} == ALL_TOOLS
        listed = await call(client, "list_tables")
        names = {t["name"] for t in listed["tables"]}
        assert {"users", "addresses", "orders", "order_items", "payments"} <= names
        users = await call(client, "get_sample_rows", table_name="users", limit=2)
        assert users["row_count"] == 2
        assert all(r["password_hash"] == "[REDACTED]" for r in users["rows"])
        orders = await call(client, "describe_table", table_name="orders")
        assert orders["description"]
        assert any(c["enum_values"] for c in orders["columns"])
        path = await call(client, "find_join_path", from_table="payments", to_table="users")
        assert path["paths"][0]["depth"] >= 1
        counted = await call(
            client, "execute_query", sql="SELECT count(*) AS n " + path["paths"][0]["sql_example"]
        )
        assert counted["rows"][0]["n"] > 0
        # The demo serves through a read-only role: the start-up audit has nothing to report.
        assert client.instructions and "more rights than reading" not in client.instructions

"""build_server(settings) -> MCPServer: the only module that registers with the SDK."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version

from mcp.server.mcpserver import MCPServer

from pg_mcp_server.app import AppContext
from pg_mcp_server.config import Settings
from pg_mcp_server.database.engine import Database
from pg_mcp_server.database.guard import SqlGuard
from pg_mcp_server.tools.query_tools import query_tools
from pg_mcp_server.tools.registry import PgTool
from pg_mcp_server.tools.relationship_tools import relationship_tools
from pg_mcp_server.tools.schema_tools import schema_tools

logger = logging.getLogger(__name__)

INSTRUCTIONS = """This server gives read-only access to one PostgreSQL database. Work in layers:
1. Discover: list_schemas -> list_tables(schema_name) -> describe_table(table_name) for exact
   column names, types, keys and enum values; get_sample_rows to see real values and formats.
2. Relate: get_foreign_keys(table) shows a table's keys both ways; find_join_path(a, b) gives
   the shortest foreign-key route between two tables with a JOIN clause that runs as-is.
3. Query: execute_query runs one read-only SELECT with $1, $2 parameters (pass values in
   `params`, never inline them); explain_query shows the plan and warns about slow spots.
   Anything that writes, locks or changes settings is refused.
Names are case-sensitive as stored. Errors come back as JSON with a code and a suggestion
(for example TABLE_NOT_FOUND with the closest names): follow the suggestion."""


def _version() -> str:
    try:
        return version("pg-mcp-server")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0.0.0"


def all_tools(settings: Settings) -> list[PgTool]:
    schema = settings.database.default_schema
    return [*schema_tools(schema), *relationship_tools(schema), *query_tools()]


def instructions(role_warnings: list[str]) -> str:
    if not role_warnings:
        return INSTRUCTIONS
    return (
        INSTRUCTIONS
        + "\nNote: the database role has more rights than reading ("
        + "; ".join(role_warnings)
        + "). Queries are still refused unless read-only, but be careful with what you run."
    )


def build_server(
    settings: Settings, role_warnings: list[str] | None = None, db: Database | None = None
) -> MCPServer[AppContext]:
    """The MCP server. Pass `db` to share a pool with something else (the HTTP gateway's
    /health); its owner disposes it. Otherwise the lifespan opens and disposes its own."""

    @asynccontextmanager
    async def lifespan(_: MCPServer[AppContext]) -> AsyncIterator[AppContext]:
        database = db or Database(settings.database)
        guard = SqlGuard(
            strict_comments=settings.server.block_keywords_in_comments, connect=database.session
        )
        try:
            yield AppContext(
                settings=settings,
                db=database,
                guard=guard,
                sensitive=settings.server.sensitive_regex(),
            )
        finally:
            await guard.close()
            if db is None:
                await database.dispose()

    return MCPServer(
        name="pg-mcp-server",
        title="PostgreSQL MCP server",
        version=_version(),
        instructions=instructions(role_warnings or []),
        tools=list(all_tools(settings)),
        lifespan=lifespan,
        log_level=settings.server.log_level,
    )

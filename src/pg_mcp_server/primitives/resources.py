"""Built-in resources: the server itself (pg://system_info, pg://settings, pg://stat/...) and
the schema, browsable as pg://schemas and the templates below it.

Server resources run one statement of `database/catalog/server_info.py` on a pooled
read-only session.
Schema resources run the tool that gives the same answer (list_schemas, list_tables,
describe_table, get_sample_rows) exactly as `tools/call` does, so a template read is the
tool's structured output, from the same code and the same caches, errors included.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from pg_mcp_server.database.catalog import erd, server_info
from pg_mcp_server.primitives.registry import (
    Argument,
    Content,
    Request,
    ResourceDef,
    TemplateDef,
)

SCHEMA = Argument("schema", "Schema name, exactly as stored (case-sensitive)", "schema", True)
TABLE = Argument("table", "Table or view name, exactly as stored", "table", True)


def _statement(
    query: Callable[[asyncpg.Connection], Awaitable[dict[str, Any]]],
) -> Callable[[Request], Awaitable[Content]]:
    async def read(request: Request) -> Content:
        async with request.app.db.session() as conn:
            return await query(conn)

    return read


async def _settings(conn: asyncpg.Connection) -> dict[str, Any]:
    return await server_info.settings(conn, every=False)


async def _all_settings(conn: asyncpg.Connection) -> dict[str, Any]:
    return await server_info.settings(conn, every=True)


async def _schemas(request: Request) -> Content:
    return await request.tool_text("list_schemas", {})


async def _tables(request: Request, p: dict[str, str]) -> Content:
    return await request.tool_text("list_tables", {"schema_name": p["schema"]})


async def _table(request: Request, p: dict[str, str]) -> Content:
    arguments = {"table_name": p["table"], "schema_name": p["schema"]}
    return await request.tool_text("describe_table", arguments)


async def _sample(request: Request, p: dict[str, str]) -> Content:
    arguments = {"table_name": p["table"], "schema_name": p["schema"]}
    return await request.tool_text("get_sample_rows", arguments)


RESULT = Argument("id", "A held result's id (in execute_query's next_cursor)", "text", True)
PAGE = Argument("page", "Page number, from 1", "text", True)


async def _result_page(request: Request, p: dict[str, str]) -> Content:
    """A page of a held result, exactly as execute_query(cursor=...) answers it."""
    return await request.tool_text("execute_query", {"cursor": f"{p['id']}.{p['page']}"})


async def _recent_queries(request: Request) -> Content:
    from pg_mcp_server.results import current_owner

    return {"queries": request.app.history.recent(current_owner())}


def result_resources() -> list[ResourceDef]:
    return [
        ResourceDef(
            "pg://queries/recent",
            "queries_recent",
            "Recent queries",
            "The last 50 statements execute_query ran for this caller on this server "
            "process, newest first: the SQL (cut at 2,000 characters), its query_hash, "
            "row_count, has_more, execution_time_ms and when; or the error code of one that "
            "failed.",
            _recent_queries,
        ),
    ]


def result_templates() -> list[TemplateDef]:
    return [
        TemplateDef(
            "pg://results/{id}/{page}",
            "result_page",
            "Result page",
            "One page of a result execute_query held because it did not fit one answer "
            "(its next_cursor and resource_link name the next page), exactly as "
            "execute_query(cursor=...) answers it: read from what the query returned once, "
            "never run again. Expires when left idle (RESULT_EXPIRED: run the query again).",
            [RESULT, PAGE],
            _result_page,
            tool="execute_query",
        ),
    ]


async def _schema_erd(request: Request, p: dict[str, str]) -> Content:
    async with request.app.db.session() as conn:
        drawn = await erd.diagram(conn, p["schema"])
    return drawn.markdown(f"Schema {p['schema']}")


async def _table_erd(request: Request, p: dict[str, str]) -> Content:
    async with request.app.db.session() as conn:
        drawn = await erd.diagram(conn, p["schema"], p["table"])
    return drawn.markdown(f"{p['schema']}.{p['table']} and the tables its keys join")


MARKDOWN = "text/markdown"


def builtin_resources() -> list[ResourceDef]:
    return [*_server_resources(), *result_resources()]


def _server_resources() -> list[ResourceDef]:
    return [
        ResourceDef(
            "pg://system_info",
            "system_info",
            "PostgreSQL server",
            "PostgreSQL version and version number, database, current user, encodings, "
            "time zone, whether this is a standby, start time, database size, and the "
            "installed extensions with their versions.",
            _statement(server_info.system_info),
        ),
        ResourceDef(
            "pg://settings",
            "settings",
            "Server settings",
            "Settings that differ from PostgreSQL's built-in defaults, plus the commonly "
            "needed ones (memory, planner costs, timeouts, locale, search_path): name, "
            "value, unit, source and a short description. pg://settings/all lists every one.",
            _statement(_settings),
        ),
        ResourceDef(
            "pg://settings/all",
            "settings_all",
            "All server settings",
            "Every setting this role may see (several hundred), with the fields of pg://settings.",
            _statement(_all_settings),
        ),
        ResourceDef(
            "pg://stat/activity",
            "stat_activity",
            "Sessions",
            "The server's sessions (pg_stat_activity): user, application, state, wait "
            "event, how long the transaction, query and state have lasted, and the query "
            "text (cut at 1,000 characters). Shows only what PostgreSQL shows this role: "
            "other roles' queries and addresses need pg_read_all_stats.",
            _statement(server_info.activity),
        ),
        ResourceDef(
            "pg://stat/replication",
            "stat_replication",
            "Replication",
            "Replicas streaming from this server with their positions and lag, replication "
            "slots, and whether this server is itself a standby (then its WAL receiver and "
            "replay position).",
            _statement(server_info.replication),
        ),
        ResourceDef(
            "pg://schemas",
            "schemas",
            "Schemas",
            "The schemas with owner, comment and table and view counts, as list_schemas "
            "returns them. Tables: pg://schemas/{schema}/tables.",
            _schemas,
            tool="list_schemas",
        ),
    ]


def builtin_templates() -> list[TemplateDef]:
    return [*_schema_templates(), *result_templates()]


def _schema_templates() -> list[TemplateDef]:
    return [
        TemplateDef(
            "pg://schemas/{schema}/tables",
            "tables",
            "Tables of a schema",
            "The tables and views of one schema with row estimates and sizes, as list_tables "
            "returns them (the first 1,000 in name order that fit the answer budget; list_tables "
            "reads on from its next_cursor).",
            [SCHEMA],
            _tables,
            tool="list_tables",
        ),
        TemplateDef(
            "pg://schemas/{schema}/tables/{table}",
            "table",
            "Table",
            "One table or view described exactly as describe_table returns it: columns with "
            "types and keys, indexes, constraints, enum labels.",
            [SCHEMA, TABLE],
            _table,
            tool="describe_table",
        ),
        TemplateDef(
            "pg://schemas/{schema}/erd",
            "schema_erd",
            "Schema diagram",
            "An entity-relationship diagram of the schema's tables as Mermaid erDiagram "
            "text in Markdown: key columns, every foreign key with its cardinality, NOT VALID "
            "keys dashed; the 60 most connected tables when there are more.",
            [SCHEMA],
            _schema_erd,
            mime_type=MARKDOWN,
        ),
        TemplateDef(
            "pg://schemas/{schema}/tables/{table}/erd",
            "table_erd",
            "Table diagram",
            "The table and every table a foreign key joins it to, as a Mermaid erDiagram "
            "(as pg://schemas/{schema}/erd draws them).",
            [SCHEMA, TABLE],
            _table_erd,
            mime_type=MARKDOWN,
        ),
        TemplateDef(
            "pg://schemas/{schema}/tables/{table}/sample",
            "table_sample",
            "Table sample",
            "Five rows of the table as get_sample_rows returns them (ordered by primary "
            "key, long text cut, sensitive columns redacted).",
            [SCHEMA, TABLE],
            _sample,
            tool="get_sample_rows",
        ),
    ]

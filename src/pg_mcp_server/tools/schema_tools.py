"""Layer 1, schema discovery: list_schemas, list_tables, describe_table, get_sample_rows.

Thin wrappers: validate input (pydantic, through the signature), open the read-only
transaction, call `database/`, wrap the answer in the PRD output model.
"""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult, TextContent
from pydantic import Field

from pg_mcp_server.app import app_context
from pg_mcp_server.database import catalog
from pg_mcp_server.database.sampling import sample_rows
from pg_mcp_server.models.schema import (
    DescribeTableOutput,
    GetSampleRowsOutput,
    ListSchemasOutput,
    ListTablesOutput,
    SchemaInfo,
    TableInfo,
)
from pg_mcp_server.tools.registry import READ_ONLY, PgTool, make_tool, ok, ok_json

LIST_SCHEMAS = """List the schemas (namespaces) of the database with owner, comment and table count.

Start here when exploring an unknown database, then call list_tables on a schema.
System schemas (pg_catalog, information_schema, pg_toast) are hidden unless include_system=true.
Example: list_schemas() -> {"schemas": [{"name": "public", "owner": "postgres",
"description": "standard public schema", "table_count": 15, "view_count": 7}], "total_count": 1}"""

LIST_TABLES = """List the tables (and by default views) of one schema with row estimates and sizes.

Partitions are not listed separately: a partitioned table lists them in `partitions`.
`name_pattern` is a case-insensitive LIKE pattern ('%' any text, '_' one character).
Large schemas come in pages of `limit` (default 1000) in name order: when `has_more` is true,
call again with `offset` advanced; `total_count` counts every match.
Next step: describe_table for the columns, keys and indexes of a table.
Example: list_tables(schema_name="public", name_pattern="order%") -> {"tables": [{"name":
"orders", "type": "table", "estimated_row_count": 890000, "size_pretty": "100 MB",
"has_primary_key": true, "column_count": 18, ...}], "schema_name": "public", "total_count": 1}"""

DESCRIBE_TABLE = """Describe one table or view: columns (type, nullability, default, comment,
primary/unique/foreign key, enum labels), indexes and constraints (PK, FK, UNIQUE, CHECK).

Use it before writing a query so column names and types are right; foreign_key on a column
tells you what to join it to. Names are exact (case-sensitive, as stored).
Example: describe_table(table_name="orders") -> {"table_name": "orders", "columns": [{"name":
"user_id", "data_type": "uuid", "is_nullable": false, "foreign_key": {"referenced_table":
"users", "referenced_column": "id", ...}, ...}], "indexes": [...], "constraints": [...]}"""

GET_SAMPLE_ROWS = """Fetch a few real rows of a table to see what the data looks like
(formats, typical values, NULLs). Read-only.

Rows come ordered by primary key unless randomize=true. where_clause is a boolean SQL condition
without the WHERE keyword, e.g. "status = 'shipped' AND total > 100"; it must be a plain
condition (no subquery tricks, no side-effect functions). bytea values are base64; columns
whose names look sensitive (password, secret, token) are redacted; long text is cut.
Example: get_sample_rows(table_name="orders", limit=2, columns=["id", "status"]) ->
{"columns": ["id", "status"], "rows": [{"id": 1, "status": "delivered"}, ...],
"row_count": 2, "total_table_rows": 890000, "note": "first rows ordered by primary key"}"""

SchemaName = Annotated[str, Field(description="Schema containing the table")]

SAMPLE_ANNOTATIONS = READ_ONLY.model_copy(update={"idempotent_hint": False})


def schema_tools(default_schema: str) -> list[PgTool]:
    """The Layer 1 tools; `default_schema` (PG_DEFAULT_SCHEMA) is the schema_name default."""

    async def list_schemas(
        ctx: Context,
        include_system: Annotated[
            bool, Field(description="Include system schemas (pg_*, information_schema)")
        ] = False,
    ) -> Annotated[CallToolResult, ListSchemasOutput]:
        app = app_context(ctx)
        rows = await app.db.run(lambda conn: catalog.list_schemas(conn, include_system), own=True)
        schemas = [SchemaInfo(**r) for r in rows]
        return ok(ListSchemasOutput(schemas=schemas, total_count=len(schemas)))

    async def list_tables(
        ctx: Context,
        schema_name: Annotated[
            str, Field(description="Schema to list tables from")
        ] = default_schema,
        include_views: Annotated[bool, Field(description="Include views in the listing")] = True,
        name_pattern: Annotated[
            str | None,
            Field(
                description=(
                    "Optional LIKE pattern to filter table names (e.g., 'user%'); case-insensitive"
                )
            ),
        ] = None,
        limit: Annotated[
            int, Field(ge=1, le=10000, description="Most objects to return (one page)")
        ] = 1000,
        offset: Annotated[
            int, Field(ge=0, description="Objects to skip, in name order (for the next page)")
        ] = 0,
    ) -> Annotated[CallToolResult, ListTablesOutput]:
        app = app_context(ctx)
        rows, total = await app.db.run(
            lambda conn: catalog.list_tables(
                conn, schema_name, include_views, name_pattern, limit, offset
            ),
            own=True,
        )
        tables = [TableInfo(schema_name=schema_name, **r) for r in rows]
        return ok(
            ListTablesOutput(
                tables=tables,
                schema_name=schema_name,
                total_count=total,
                has_more=offset + len(tables) < total,
            )
        )

    async def describe_table(
        ctx: Context,
        table_name: Annotated[str, Field(description="Name of the table to describe")],
        schema_name: SchemaName = default_schema,
        include_indexes: Annotated[bool, Field(description="Include index information")] = True,
        include_constraints: Annotated[
            bool, Field(description="Include constraint information")
        ] = True,
    ) -> Annotated[CallToolResult, DescribeTableOutput]:
        app = app_context(ctx)
        key = (schema_name, table_name, include_indexes, include_constraints)
        cached = app.described.get(key)
        row = await app.db.run(
            lambda conn: catalog.describe_table(
                conn,
                schema_name,
                table_name,
                include_indexes,
                include_constraints,
                known_token=cached[0] if cached else "",
            ),
            own=True,
        )
        fresh = {
            "estimated_row_count": row["estimated_row_count"],
            "size_pretty": row["size_pretty"],
        }
        if row["doc"] is None and cached:
            return ok_json(cached[1] | fresh)
        structured = DescribeTableOutput.model_validate(row["doc"] | fresh).model_dump(mode="json")
        result = ok_json(structured)
        text = result.content[0]
        size = len(text.text) if isinstance(text, TextContent) else 0
        app.described.put(key, row["token"], structured, size)
        return result

    async def get_sample_rows(
        ctx: Context,
        table_name: Annotated[str, Field(description="Name of the table to sample")],
        schema_name: SchemaName = default_schema,
        limit: Annotated[
            int, Field(ge=1, le=100, description="Number of sample rows to retrieve")
        ] = 5,
        columns: Annotated[
            list[str] | None,
            Field(description="Specific columns to include (null for all)"),
        ] = None,
        where_clause: Annotated[
            str | None,
            Field(
                description=(
                    "Optional WHERE clause to filter samples (without 'WHERE' keyword), "
                    "e.g. \"status = 'active'\""
                )
            ),
        ] = None,
        randomize: Annotated[
            bool, Field(description="Randomize row selection (slower on large tables)")
        ] = False,
    ) -> Annotated[CallToolResult, GetSampleRowsOutput]:
        app = app_context(ctx)
        sample = await app.db.run(
            lambda conn: sample_rows(
                conn,
                app.db,
                app.shapes,
                app.guard,
                schema=schema_name,
                table=table_name,
                limit=limit,
                columns=columns,
                where_clause=where_clause,
                randomize=randomize,
                sensitive=app.sensitive,
                max_bytes=app.settings.server.max_result_bytes,
            ),
            explicit=True,
        )
        return ok(
            GetSampleRowsOutput(
                table_name=table_name,
                schema_name=schema_name,
                columns=sample.columns,
                rows=sample.rows,
                row_count=len(sample.rows),
                total_table_rows=sample.total_table_rows,
                note=sample.note,
            )
        )

    return [
        make_tool(
            list_schemas, name="list_schemas", title="List schemas", description=LIST_SCHEMAS
        ),
        make_tool(list_tables, name="list_tables", title="List tables", description=LIST_TABLES),
        make_tool(
            describe_table,
            name="describe_table",
            title="Describe table",
            description=DESCRIBE_TABLE,
        ),
        make_tool(
            get_sample_rows,
            name="get_sample_rows",
            title="Get sample rows",
            description=GET_SAMPLE_ROWS,
            annotations=SAMPLE_ANNOTATIONS,
        ),
    ]

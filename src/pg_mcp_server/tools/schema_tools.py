"""Layer 1, schema discovery: list_schemas, list_tables, search_tables, describe_table,
get_sample_rows.

Thin wrappers: validate input (pydantic, through the signature), open the read-only
transaction, call `database/`, wrap the answer in the output model. Descriptions are read by
the model on every session: every byte counts (all tools together stay under 12 KB).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from mcp_types import CallToolResult
from pydantic import Field

from pg_mcp_server.app import AppContext
from pg_mcp_server.database.catalog import search_tables as search, tables as catalog
from pg_mcp_server.database.rows import Relation, column_hint, sample_rows
from pg_mcp_server.errors import ColumnNotFoundError
from pg_mcp_server.models.schema import (
    DescribeTableOutput,
    GetSampleRowsOutput,
    ListSchemasOutput,
    ListTablesOutput,
    SchemaInfo,
    SearchMatch,
    SearchTablesOutput,
    TableInfo,
)
from pg_mcp_server.tools.registry import READ_ONLY, ToolDef, make_tool, ok, ok_json

LIST_SCHEMAS = """The database's schemas: owner, comment, table_count, view_count. Start here.
Example: list_schemas()"""

LIST_TABLES = """One schema's tables and views: comment, row estimate, size, primary key, column
count. empty=true: no rows for certain; else the estimate is as of stats_as_of (absent: never
analyzed). include_columns=true: a schema map, each column as "name type[ PK][ -> table.col]".
Example: list_tables(schema_name="sales", include_columns=true)"""

SEARCH_TABLES = """Find the tables that hold something, in all schemas: words matched against
table and column names and comments, best first. Example: search_tables(query="customer email")"""

DESCRIBE_TABLE = """A table's or view's columns (type, nullability, default, comment, keys, enum
labels, identity, generated), indexes, constraints (a one-column foreign key is on its
column), partitions, view definition, row facts as in list_tables. Defaults left out:
is_nullable true, on_update/on_delete NO ACTION, index_type btree, an index definition saying
no more. Example: describe_table(table_name="orders")"""

GET_SAMPLE_ROWS = """A few real rows, to see formats and values: `rows` are arrays in `columns`
order, by primary key unless randomize=true; long text is cut, sensitive columns redacted.
Example: get_sample_rows(table_name="orders", where_clause="status = 'shipped'")"""

# Tables per list_tables page: a schema map line per column makes a table ~10x the bytes.
LIST_PAGE = 1000
MAP_PAGE = 100

SAMPLE_ANNOTATIONS = READ_ONLY.model_copy(update={"idempotent_hint": False})

# Read afresh on every call (they change outside transactions), and put last.
_FRESH = ("estimated_row_count", "empty", "stats_as_of", "size_pretty")


async def describe_document(
    app: AppContext,
    schema: str,
    table: str,
    include_indexes: bool = True,
    include_constraints: bool = True,
) -> dict[str, Any]:
    """describe_table's answer (its structured content), for the tool and for anything else
    that shows a table: one catalog statement, whose document is reused from `app.described`
    while nothing has committed since (see catalog.SnapshotCache)."""
    key = (schema, table, include_indexes, include_constraints)
    cached = app.described.get(key)
    row = await app.db.run(
        lambda conn: catalog.describe_table(
            conn,
            schema,
            table,
            include_indexes,
            include_constraints,
            known_token=cached[0] if cached else "",
        ),
        own=True,
    )
    fields = DescribeTableOutput.model_fields
    fresh = {k: row[k] for k in _FRESH if row[k] != fields[k].default}
    if row["doc"] is not None or not cached:
        doc = DescribeTableOutput.model_validate(row["doc"]).dump()
        app.described.put(key, row["token"], doc, len(json.dumps(doc)))
        return doc | fresh
    return cached[1] | fresh


def schema_tools(default_schema: str) -> list[ToolDef]:
    """The Layer 1 tools; `default_schema` (PG_DEFAULT_SCHEMA) is the schema_name default."""

    async def list_schemas(
        app: AppContext, include_system: bool = False
    ) -> Annotated[CallToolResult, ListSchemasOutput]:
        rows = await app.db.run(lambda conn: catalog.list_schemas(conn, include_system), own=True)
        schemas = [SchemaInfo(**r) for r in rows]
        return ok(ListSchemasOutput(schemas=schemas, total_count=len(schemas)))

    async def list_tables(
        app: AppContext,
        schema_name: str = default_schema,
        include_views: bool = True,
        name_pattern: Annotated[
            str | None, Field(description="Case-insensitive LIKE pattern, e.g. 'order%'")
        ] = None,
        include_columns: bool = False,
        limit: Annotated[
            int | None,
            Field(ge=1, le=10000, description="Per page; default 1000, 100 with columns"),
        ] = None,
        offset: Annotated[int, Field(ge=0)] = 0,
    ) -> Annotated[CallToolResult, ListTablesOutput]:
        page = limit or (MAP_PAGE if include_columns else LIST_PAGE)
        rows, total = await app.db.run(
            lambda conn: catalog.list_tables(
                conn, schema_name, include_views, name_pattern, page, offset, include_columns
            ),
            own=True,
        )
        tables = [TableInfo(**r) for r in rows]
        return ok(
            ListTablesOutput(
                tables=tables,
                schema_name=schema_name,
                total_count=total,
                has_more=offset + len(tables) < total,
            )
        )

    async def search_tables(
        app: AppContext,
        query: Annotated[str, Field(description="A few words, e.g. 'invoice total'")],
        limit: Annotated[int, Field(ge=1, le=50)] = 10,
    ) -> Annotated[CallToolResult, SearchTablesOutput]:
        rows, total = await app.db.run(lambda conn: search(conn, query, limit), own=True)
        return ok(SearchTablesOutput(matches=[SearchMatch(**r) for r in rows], total_count=total))

    async def describe_table(
        app: AppContext,
        table_name: str,
        schema_name: str = default_schema,
        include_indexes: bool = True,
        include_constraints: bool = True,
    ) -> Annotated[CallToolResult, DescribeTableOutput]:
        return ok_json(
            await describe_document(
                app, schema_name, table_name, include_indexes, include_constraints
            )
        )

    async def get_sample_rows(
        app: AppContext,
        table_name: str,
        schema_name: str = default_schema,
        limit: Annotated[int, Field(ge=1, le=100)] = 5,
        columns: list[str] | None = None,
        where_clause: str | None = None,
        randomize: bool = False,
    ) -> Annotated[CallToolResult, GetSampleRowsOutput]:
        try:
            sample = await app.db.run(
                lambda conn: sample_rows(
                    conn,
                    app.reader,
                    schema=schema_name,
                    table=table_name,
                    limit=limit,
                    columns=columns,
                    where_clause=where_clause,
                    randomize=randomize,
                    max_text=app.settings.server.max_value_chars,
                ),
                explicit=True,
            )
        except ColumnNotFoundError as exc:  # in where_clause: say which columns there are
            table = Relation(schema_name, table_name, None)
            raise await column_hint(app.db.session, exc, [table]) from None
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
            search_tables,
            name="search_tables",
            title="Search tables",
            description=SEARCH_TABLES,
        ),
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

"""Layer 3, queries: execute_query and explain_query (read-only, always)."""

from __future__ import annotations

import re
from typing import Annotated, Any

from mcp_types import CallToolResult
from pydantic import Field

from pg_mcp_server.app import AppContext
from pg_mcp_server.database.catalog import tables as catalog
from pg_mcp_server.database.explain import explain
from pg_mcp_server.database.rows import answer, column_hint, function_hint, query_hash, relations
from pg_mcp_server.errors import (
    ColumnNotFoundError,
    InvalidSqlError,
    PgMcpError,
    TableNotFoundError,
)
from pg_mcp_server.models.results import ExecuteQueryOutput, ExplainQueryOutput
from pg_mcp_server.tools.registry import READ_ONLY, ToolDef, make_tool, ok, ok_json

EXECUTE_QUERY = """Run one read-only SQL query and return its rows as JSON.

Only a single SELECT runs (WITH, VALUES, TABLE, UNION, window functions, LATERAL are fine);
anything that writes, locks rows, changes settings or calls side-effect functions is refused
with WRITE_OPERATION_DENIED. Pass user values as parameters: $1, $2 ... in the SQL and `params`
in order (JSON values; dates and timestamps as ISO strings, bytea as base64). At most `limit`
rows come back, also bounded in bytes; `has_more` says whether more exist (`note` says why),
so add ORDER BY and LIMIT/OFFSET to page. `rows` are arrays in the order of `columns`.
Values: numbers (numeric as a string when a double would lose digits), timestamps ISO 8601,
bytea base64, json as JSON, arrays as lists, records and composites as objects, other types
in PostgreSQL's text form.
Example: execute_query(sql="SELECT status, count(*) AS n FROM orders WHERE created_at >= $1
GROUP BY status ORDER BY n DESC", params=["2025-01-01"]) -> {"columns":[{"name":"status",
"data_type":"text"},{"name":"n","data_type":"bigint"}],"rows":[["delivered",812],
["pending",40]],"row_count":2,"has_more":false,"execution_time_ms":3.1,"query_hash":"..."}"""

EXPLAIN_QUERY = """Show PostgreSQL's execution plan for a query, with the estimated cost and
rows and warnings about likely slow spots (large sequential scans and the columns filtered,
row estimates off by 10x or more, sorts or hashes spilling to disk, nested loops over many
rows). analyze=true really runs the query (read-only, rolled back) to add actual timings;
buffers needs analyze; a query with $n placeholders needs example values in `params`.
Example: explain_query(sql="SELECT * FROM orders WHERE status = 'pending'") -> {"plan": "Seq
Scan on orders  (cost=0.00..189.00 rows=5000 width=24)...", "format": "text",
"estimated_cost": 189.0, "estimated_rows": 5000, "actual_time_ms": null, "warnings":
["Sequential scan on 'orders' (~890000 rows) filtering on status - consider an index on status"]}"""

_MISSING = re.compile(r'relation "(?:([^".]+)\.)?([^"]+)" does not exist')


async def _suggest(app: AppContext, error: PgMcpError, sql: str) -> PgMcpError:
    """PostgreSQL says what is missing; add what exists, closest first: tables for a missing
    relation, the named tables' columns for a missing column, functions for a missing one.
    The failed transaction is aborted, so the lookup runs on a fresh connection."""
    if isinstance(error, ColumnNotFoundError):
        return await column_hint(app.db.session, error, relations(sql))
    if isinstance(error, InvalidSqlError):
        return await function_hint(app.db.session, error)
    found = _MISSING.search(error.message)
    if not isinstance(error, TableNotFoundError) or found is None:
        return error
    schema = found.group(1) or app.settings.database.default_schema
    async with app.db.session() as conn:
        better = await catalog.missing_table(conn, schema, found.group(2))
    if isinstance(better, TableNotFoundError):
        better.context = {**(error.context or {}), **(better.context or {})}
        return better
    return error


Params = Annotated[
    list[Any] | None,
    Field(description="Parameter values for the query (positional, matching $1, $2, etc.)"),
]


def query_tools() -> list[ToolDef]:
    async def execute_query(
        app: AppContext,
        sql: Annotated[
            str,
            Field(description="SQL SELECT query to execute. Use $1, $2, etc. for parameters."),
        ],
        params: Params = None,
        limit: Annotated[
            int | None,
            Field(
                ge=1,
                le=10000,
                description="Maximum rows to return (applied if query lacks LIMIT)",
            ),
        ] = 1000,
        timeout_ms: Annotated[
            int | None,
            Field(
                ge=1,
                description=(
                    "Query timeout in milliseconds (uses server default if not specified; "
                    "can only lower it)"
                ),
            ),
        ] = None,
    ) -> Annotated[CallToolResult, ExecuteQueryOutput]:
        try:
            result = await app.db.run(
                lambda conn: app.reader.query(conn, sql, params, limit=limit),
                timeout_ms,
                explicit=True,
                prelude=lambda: app.guard.prelude(sql),
            )
        except PgMcpError as exc:
            raise await _suggest(app, exc, sql) from None
        # The ExecuteQueryOutput fields, as plain JSON (see ok_json); the rows' JSON text is
        # PostgreSQL's own, used as is.
        output = answer(
            result.columns,
            result.rows,
            result.has_more,
            result.notes,
            execution_time_ms=round(result.elapsed_ms, 3),
            query_hash=query_hash(sql),
        )
        return ok_json(output, encoded={"columns": result.columns_json, "rows": result.rows_json})

    async def explain_query(
        app: AppContext,
        sql: Annotated[str, Field(description="SQL query to explain")],
        params: Annotated[
            list[Any] | None,
            Field(description="Parameter values (for accurate estimates)"),
        ] = None,
        analyze: Annotated[
            bool,
            Field(
                description=(
                    "Actually execute query to get real timings (slower but more accurate)"
                )
            ),
        ] = False,
        format: Annotated[
            str,
            Field(pattern="^(text|json|yaml)$", description="Output format for the plan"),
        ] = "text",
        verbose: Annotated[
            bool, Field(description="Include additional detail in the plan")
        ] = False,
        buffers: Annotated[
            bool,
            Field(description="Include buffer usage statistics (requires analyze=true)"),
        ] = False,
    ) -> Annotated[CallToolResult, ExplainQueryOutput]:
        try:
            result = await app.db.run(
                lambda conn: explain(
                    conn,
                    app.db,
                    app.guard,
                    sql,
                    params,
                    analyze=analyze,
                    fmt=format,
                    verbose=verbose,
                    buffers=buffers,
                    shapes=app.shapes,
                    sensitive=app.sensitive,
                ),
                explicit=True,
                prelude=lambda: app.guard.prelude(sql),
            )
        except PgMcpError as exc:
            raise await _suggest(app, exc, sql) from None
        return ok(
            ExplainQueryOutput(
                plan=result.plan,
                format=format,
                estimated_cost=result.estimated_cost,
                estimated_rows=result.estimated_rows,
                actual_time_ms=result.actual_time_ms,
                warnings=result.warnings or None,
            )
        )

    return [
        make_tool(
            execute_query, name="execute_query", title="Execute query", description=EXECUTE_QUERY
        ),
        make_tool(
            explain_query,
            name="explain_query",
            title="Explain query",
            description=EXPLAIN_QUERY,
            annotations=READ_ONLY,
        ),
    ]

"""Layer 3, queries: execute_query and explain_query (read-only, always)."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Annotated, Any

from mcp_types import CallToolResult, ResourceLink
from pydantic import Field

from pg_mcp_server.app import AppContext
from pg_mcp_server.database.catalog import tables as catalog
from pg_mcp_server.database.explain import explain
from pg_mcp_server.database.rows import (
    QueryResult,
    answer,
    column_hint,
    function_hint,
    query_hash,
    relations,
)
from pg_mcp_server.errors import (
    ColumnNotFoundError,
    InvalidSqlError,
    ParameterError,
    PgMcpError,
    TableNotFoundError,
)
from pg_mcp_server.models.results import ExecuteQueryOutput, ExplainQueryOutput
from pg_mcp_server.results import StoreUnavailable, current_owner, pages
from pg_mcp_server.tools.registry import READ_ONLY, ToolDef, make_tool, ok, ok_json

EXECUTE_QUERY = """Run one read-only SQL query and return its rows as JSON.

Only a single SELECT runs (WITH, VALUES, TABLE, UNION, window functions, LATERAL are fine);
anything that writes, locks rows, changes settings or calls side-effect functions is refused
with WRITE_OPERATION_DENIED. Pass user values as parameters: $1, $2 ... in the SQL and `params`
in order (JSON values; dates and timestamps as ISO strings, bytea as base64). At most `limit`
rows; an answer holds what fits its size budget, and `next_cursor` gives the next page: pass
only `cursor` (nothing runs again). Long values are cut ("...[cut: N chars]") unless in
`full_values`. Values: numbers (numeric as a string when a double would lose digits),
timestamps ISO 8601, bytea base64, json as JSON, arrays as lists, records and composites as
objects, other types in PostgreSQL's text form.
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

MAX_LIMIT = 1_000_000  # the schema's bound; MCP_MAX_ROWS is the server's own

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


async def _held(app: AppContext, result: QueryResult, sql_hash: str) -> CallToolResult:
    """A result bigger than one answer: every page put in the store, the first answered with
    the cursor of the next. The statement's transaction has ended: what is held is the rows'
    JSON, read once, so no page runs the query again or holds anything open on the database."""
    assert result.page_bytes is not None
    cut = pages.cut(result.rows_json, len(result.rows), result.rest, result.page_bytes)
    held, first = pages.holding(
        cut,
        result.columns_json,
        more=result.has_more,
        notes=result.notes,
        execution_time_ms=round(result.elapsed_ms, 3),
        query_hash=sql_hash,
        max_bytes=app.settings.server.result_store_bytes,
    )
    try:
        result_id = await app.results.put(current_owner(), held)
    except StoreUnavailable as exc:
        # A store that is down costs paging, never the answer (results/store.py): the first
        # page without a cursor, saying why.
        why = f"paging is unavailable ({exc}): narrow the query, or run it again later"
        first = dataclasses.replace(first, notes=(*first.notes, why))
        output, encoded = pages.answer(first, result.rows_json, result.rows, 1, len(held), None)
        return ok_json(output, encoded=encoded)
    return _page_result(first, result.rows_json, result.rows, 1, len(held), result_id)


def _page_result(
    header: pages.Header,
    rows_json: str,
    rows: list[Any],
    page: int,
    count: int,
    result_id: str,
) -> CallToolResult:
    output, encoded = pages.answer(header, rows_json, rows, page, count, result_id)
    result = ok_json(output, encoded=encoded)
    if page < count:
        # For clients that show links; the cursor and the note carry the same, for those that
        # show the model only the structured content.
        result.content.append(
            ResourceLink(
                type="resource_link",
                uri=pages.uri(result_id, page + 1),
                name=f"result page {page + 1}",
                description=f"Page {page + 1} of {count} of this result",
                mime_type="application/json",
            )
        )
    return result


async def read_page(app: AppContext, cursor: str) -> CallToolResult:
    """The page a cursor names, from the store: a look-up, never a query."""
    result_id, page = pages.parse_cursor(cursor)
    data, count = await app.results.page(current_owner(), result_id, page - 1)
    header, rows_json = pages.split(data)
    return _page_result(header, rows_json, json.loads(rows_json), page, count, result_id)


def _one_of(sql: str, cursor: str) -> None:
    if sql and cursor:
        raise ParameterError(
            "Pass either 'sql' (run a query) or 'cursor' (the next page of one), not both.",
            suggestion="To read the next page, call execute_query with only cursor=next_cursor.",
            context={"parameter": "cursor"},
        )
    if not sql and not cursor:
        raise ParameterError(
            "Missing 'sql': pass the query to run (or 'cursor' for the next page of one).",
            suggestion='execute_query(sql="SELECT ...") runs a query; cursor=next_cursor '
            "reads the next page of an earlier answer.",
            context={"parameter": "sql"},
        )


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
        ] = "",
        params: Params = None,
        limit: Annotated[
            int | None,
            Field(
                ge=1,
                le=MAX_LIMIT,
                description="Most rows over all pages (if the query lacks LIMIT)",
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
        cursor: Annotated[str, Field(description="An answer's next_cursor: its next page")] = "",
        full_values: Annotated[list[str], Field(description="Columns never cut")] = [],  # noqa: B006 (pydantic copies it per call)
    ) -> Annotated[CallToolResult, ExecuteQueryOutput]:
        _one_of(sql, cursor)
        if cursor:
            return await read_page(app, cursor)
        text = sql
        sql_hash = query_hash(text)
        owner = current_owner()
        server = app.settings.server
        full = frozenset(full_values)
        try:
            try:
                result = await app.db.run(
                    lambda conn: app.reader.query(
                        conn,
                        text,
                        params,
                        limit=limit,
                        answer_bytes=server.answer_budget_bytes,
                        max_text=server.max_value_chars,
                        full=full,
                    ),
                    timeout_ms,
                    explicit=True,
                    prelude=lambda: app.guard.prelude(text),
                )
            except PgMcpError as exc:
                raise await _suggest(app, exc, text) from None
        except Exception as exc:
            code = exc.code if isinstance(exc, PgMcpError) else "INTERNAL_ERROR"
            app.history.add(owner, text, sql_hash, error=code)
            raise
        elapsed = round(result.elapsed_ms, 3)
        app.history.add(
            owner,
            text,
            sql_hash,
            row_count=result.kept,
            has_more=result.has_more,
            execution_time_ms=elapsed,
        )
        if result.rest:
            return await _held(app, result, sql_hash)
        # The ExecuteQueryOutput fields, as plain JSON (see ok_json); the rows' JSON text is
        # PostgreSQL's own, used as is.
        output = answer(
            result.columns,
            result.rows,
            result.has_more,
            result.notes,
            execution_time_ms=elapsed,
            query_hash=sql_hash,
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

"""Layer 1, schema discovery: list_schemas, list_tables, search_tables, describe_table,
get_sample_rows.

Thin wrappers: validate input (pydantic, through the signature), open the read-only
transaction, call `database/`, wrap the answer in the output model. Descriptions are read by
the model on every session: every byte counts (tools/list has a budget, tests/test_answers.py).

Its size (~400 lines) is five tools with their descriptions and their paging, one file as the
PRD's layer is one.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from mcp_types import CallToolResult
from pydantic import Field, WithJsonSchema

from pg_mcp_server.app import AppContext
from pg_mcp_server.database.catalog import (
    may_be_qualified,
    pages,
    search_tables as search,
    split_name,
    tables as catalog,
)
from pg_mcp_server.database.rows import Relation, column_hint, cut_text, sample_rows
from pg_mcp_server.errors import ColumnNotFoundError, ParameterError
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
analyzed). include_columns=true: a schema map, a column as "name type[ PK][ -> table.col][ --
comment]", a multi-column key "-> t(a, b) [key k with b]", [NOT VALID]: rows unchecked.
Paged: next_cursor. Example: list_tables(schema_name="sales", include_columns=true)"""

SEARCH_TABLES = """Find tables that hold something, in all schemas: words matched against
table and column names and comments, best first. Paged: next_cursor.
Example: search_tables(query="customer email")"""

DESCRIBE_TABLE = """A table's or view's columns (type, nullability, default, comment, keys, enum
labels, identity, generated), indexes, constraints (a one-column foreign key is on its
column), partitions, view definition, list_tables' row facts. Defaults left out:
is_nullable true, on_update/on_delete NO ACTION, index_type btree, a redundant index
definition. Paged: next_cursor. Example: describe_table(table_name="orders")"""

GET_SAMPLE_ROWS = """A few real rows: `rows` are arrays in `columns` order, by primary key unless
randomize=true; long values are cut, sensitive columns redacted.
Example: get_sample_rows(table_name="orders", where_clause="status = 'shipped'")"""

# Tables per list_tables page: a schema map line per column makes a table ~10x the bytes.
LIST_PAGE = 1000
MAP_PAGE = 100

# The argument execute_query pages with too. Declared a plain string, without a description
# (the tool descriptions say what to pass): tools/list has a budget (tests/test_answers.py).
CURSOR = Annotated[str | None, WithJsonSchema({"type": "string"})]

SAMPLE_ANNOTATIONS = READ_ONLY.model_copy(update={"idempotent_hint": False})

DEFINITION_HELD = (
    "view_definition is left out: another session is changing this view (it holds, or waits"
    " for, the view's ACCESS EXCLUSIVE lock). Describe the view again once that session ends."
)

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
        doc = _cut_document(
            DescribeTableOutput.model_validate(row["doc"]).dump(),
            app.settings.server.max_value_chars,
        )
        if row["definition_held"]:  # not kept: the next call reads the definition
            return doc | fresh | {"note": DEFINITION_HELD}
        app.described.put(key, row["token"], doc, len(json.dumps(doc)))
        return doc | fresh
    return cached[1] | fresh


def _cut_document(doc: dict[str, Any], max_chars: int) -> dict[str, Any]:
    """describe_table's answer with its long texts (comments, defaults, expressions,
    definitions) cut to `max_chars` and marked; names, types and keys are never cut."""
    out = doc | _cut(doc, ("description", "view_definition", "partition_key"), max_chars)
    texts = ("description", "default_value", "generation_expression", "definition")
    for part in ("columns", "indexes", "constraints"):
        if part in doc:
            out[part] = [item | _cut(item, texts, max_chars) for item in doc[part]]
    return out


async def resolve_table(
    app: AppContext, schema: str, table: str, default_schema: str
) -> tuple[str, str]:
    """(schema, table) of a table name that may be qualified (`sales.orders`,
    `"Sales"."Orders"`), as PostgreSQL parses it, unless a table has that exact name; one
    statement, only for a name with a dot or a quote."""
    if not may_be_qualified(table):
        return schema, table
    return await app.db.run(lambda conn: split_name(conn, schema, table, default_schema), own=True)


def _resume(
    tool: str, cursor: str | None, arguments: dict[str, Any], offset: int = 0
) -> tuple[int, str | None]:
    """Where a page starts (`cursor`'s offset, else `offset`) and the fingerprint of the
    listing the cursor was cut from (None without one)."""
    if cursor is None:
        return offset, None
    if offset:
        raise ParameterError(
            "Give cursor or offset, not both",
            suggestion="Pass next_cursor alone to read on, or offset alone.",
            context={"offset": offset},
        )
    at = pages.decode(cursor, tool, arguments)
    return at.offset, at.listing


def _paged(
    answer: dict[str, Any],
    tool: str,
    arguments: dict[str, Any],
    *,
    what: str,
    start: int,
    shown: int,
    total: int,
    listing: str,
    changed: bool,
) -> dict[str, Any]:
    """`answer` with its note (after any it has) and, when more is held, the cursor to it."""
    note = pages.note(what, start, shown, total, changed=changed)
    if note:
        answer["note"] = f"{answer['note']} {note}" if answer.get("note") else note
    if start + shown < total:
        answer["next_cursor"] = pages.encode(tool, arguments, start + shown, listing)
    return answer


def _cut(row: dict[str, Any], keys: tuple[str, ...], max_chars: int) -> dict[str, Any]:
    """The text fields `keys` of `row`, cut to `max_chars` and marked when longer."""
    return {k: cut_text(row[k], max_chars) for k in keys if isinstance(row.get(k), str)}


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
            str | None, Field(description="ILIKE pattern, e.g. 'order%'")
        ] = None,
        include_columns: bool = False,
        limit: Annotated[
            int | None,
            Field(ge=1, le=10000, description="Default 1000, 100 with columns"),
        ] = None,
        offset: Annotated[int, Field(ge=0)] = 0,
        cursor: CURSOR = None,
    ) -> Annotated[CallToolResult, ListTablesOutput]:
        arguments = {
            "schema_name": schema_name,
            "include_views": include_views,
            "name_pattern": name_pattern,
            "include_columns": include_columns,
            "limit": limit,
        }
        start, listing = _resume("list_tables", cursor, arguments, offset)
        page = limit or (MAP_PAGE if include_columns else LIST_PAGE)
        rows, total, now = await app.db.run(
            lambda conn: catalog.list_tables(
                conn, schema_name, include_views, name_pattern, page, start, include_columns
            ),
            own=True,
        )
        cut = app.settings.server.max_value_chars
        tables = [TableInfo(**(r | _cut(r, ("description",), cut))).dump() for r in rows]
        answer: dict[str, Any] = {
            "tables": [],
            "schema_name": schema_name,
            "total_count": total,
        }
        kept = pages.fit(answer, tables, app.settings.server.answer_budget_bytes)
        end = start + kept
        answer["tables"] = tables[:kept]
        if end < total:
            answer["has_more"] = True
        return ok_json(
            _paged(
                answer,
                "list_tables",
                arguments,
                what="tables",
                start=start,
                shown=kept,
                total=total,
                listing=now,
                changed=listing is not None and listing != now,
            )
        )

    async def search_tables(
        app: AppContext,
        query: Annotated[str, Field(description="A few words, e.g. 'invoice total'")],
        limit: Annotated[int, Field(ge=1, le=50)] = 10,
        cursor: CURSOR = None,
    ) -> Annotated[CallToolResult, SearchTablesOutput]:
        arguments = {"query": query, "limit": limit}
        start, listing = _resume("search_tables", cursor, arguments)
        rows, total, now = await app.db.run(
            lambda conn: search(conn, query, limit, start), own=True
        )
        matches = [SearchMatch(**r).dump() for r in rows]
        answer: dict[str, Any] = {"matches": [], "total_count": total}
        kept = pages.fit(answer, matches, app.settings.server.answer_budget_bytes)
        answer["matches"] = matches[:kept]
        return ok_json(
            _paged(
                answer,
                "search_tables",
                arguments,
                what="matching tables",
                start=start,
                shown=kept,
                total=total,
                listing=now,
                changed=listing is not None and listing != now,
            )
        )

    async def describe_table(
        app: AppContext,
        table_name: str,
        schema_name: str = default_schema,
        include_indexes: bool = True,
        include_constraints: bool = True,
        cursor: CURSOR = None,
    ) -> Annotated[CallToolResult, DescribeTableOutput]:
        arguments = {
            "table_name": table_name,
            "schema_name": schema_name,
            "include_indexes": include_indexes,
            "include_constraints": include_constraints,
        }
        start, listing = _resume("describe_table", cursor, arguments)
        schema_name, table_name = await resolve_table(app, schema_name, table_name, default_schema)
        doc = await describe_document(
            app, schema_name, table_name, include_indexes, include_constraints
        )
        columns = doc["columns"]
        # The first page has every fact of the table and the columns that fit after them;
        # the next pages, the name and more columns.
        answer = (
            doc | {"columns": []}
            if start == 0
            else {"table_name": doc["table_name"], "schema_name": doc["schema_name"], "columns": []}
        )
        held = columns[start:]
        kept = pages.fit(answer, held, app.settings.server.answer_budget_bytes)
        answer["columns"] = held[:kept]
        now = pages.fingerprint([c["name"] for c in columns])
        return ok_json(
            _paged(
                answer,
                "describe_table",
                arguments,
                what="columns",
                start=start,
                shown=kept,
                total=len(columns),
                listing=now,
                changed=listing is not None and listing != now,
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
        schema_name, table_name = await resolve_table(app, schema_name, table_name, default_schema)
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
        # Rows past the answer budget are left out (a sample needs no cursor: ask again).
        budget = app.settings.server.answer_budget_bytes
        base = {"columns": sample.columns, "rows": [], "note": sample.note or ""}
        kept = pages.fit(base, sample.rows, budget)
        note = sample.note
        if kept < len(sample.rows):
            note = "; ".join(
                filter(
                    None,
                    [
                        note,
                        f"{kept} of {len(sample.rows)} rows fit the {budget}-byte answer "
                        "budget: ask for fewer rows or columns",
                    ],
                )
            )
        return ok(
            GetSampleRowsOutput(
                table_name=table_name,
                schema_name=schema_name,
                columns=sample.columns,
                rows=sample.rows[:kept],
                row_count=kept,
                total_table_rows=sample.total_table_rows,
                note=note,
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

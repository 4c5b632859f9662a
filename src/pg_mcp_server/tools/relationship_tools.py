"""Layer 2, relationships: get_foreign_keys and find_join_path."""

from __future__ import annotations

from typing import Annotated

import asyncpg
from mcp_types import CallToolResult
from pydantic import Field

from pg_mcp_server.app import AppContext
from pg_mcp_server.database.catalog import (
    MAX_DEPTH,
    PATH_CAP,
    Path,
    countable,
    erd,
    fan_out_notes,
    foreign_keys_of,
    join_sql,
    no_path,
    orphans_sql,
    pages,
    unchecked_keys,
    unchecked_notes,
)
from pg_mcp_server.errors import PgMcpError
from pg_mcp_server.models.relationships import (
    FindJoinPathOutput,
    ForeignKeyRelation,
    GetForeignKeysOutput,
    JoinPath,
)
from pg_mcp_server.tools.registry import ToolDef, make_tool, ok, ok_json
from pg_mcp_server.tools.schema_tools import CURSOR, resolve_table

GET_FOREIGN_KEYS = """A table's foreign keys both ways: outgoing (it references) and incoming
(others reference it). Keys of partitions are on their parent. Paged: next_cursor.
Example: get_foreign_keys(table_name="orders")"""

FIND_JOIN_PATH = """How to join two tables by foreign keys: shortest paths, each with
sql_example (runs as-is after a SELECT list), steps (each join's key), fan_out (joins that
multiply rows, with the ratio) and warning (its effect on sums over the first table);
diagram=true adds a Mermaid erDiagram of the paths' tables.
Example: find_join_path(from_table="payment", to_table="film")"""


def relationship_tools(default_schema: str) -> list[ToolDef]:
    async def get_foreign_keys(
        app: AppContext,
        table_name: str,
        schema_name: str = default_schema,
        cursor: CURSOR = None,
    ) -> Annotated[CallToolResult, GetForeignKeysOutput]:
        arguments = {"table_name": table_name, "schema_name": schema_name}
        start = 0
        listing = None
        if cursor is not None:
            at = pages.decode(cursor, "get_foreign_keys", arguments)
            start, listing = at.offset, at.listing
        schema_name, table_name = await resolve_table(app, schema_name, table_name, default_schema)
        outgoing, incoming = await app.db.run(
            lambda conn: foreign_keys_of(conn, schema_name, table_name), own=True
        )
        # One listing, outgoing keys then incoming ones, paged as a whole.
        keys = [("outgoing", k) for k in outgoing] + [("incoming", k) for k in incoming]
        items = [ForeignKeyRelation(**k.relation()).dump() for _, k in keys]
        answer = GetForeignKeysOutput(
            table_name=table_name,
            schema_name=schema_name,
            outgoing=[],
            incoming=[],
            outgoing_count=len(outgoing),
            incoming_count=len(incoming),
        ).dump()
        kept = pages.fit(answer, items[start:], app.settings.server.answer_budget_bytes)
        for (side, _), item in zip(keys[start : start + kept], items[start:], strict=False):
            answer[side].append(item)
        now = pages.fingerprint([f"{side} {k.constraint_name}" for side, k in keys])
        note = pages.note(
            "keys", start, kept, len(keys), changed=listing is not None and listing != now
        )
        if note:
            answer["note"] = note
        if start + kept < len(keys):
            answer["next_cursor"] = pages.encode("get_foreign_keys", arguments, start + kept, now)
        return ok_json(answer)

    async def find_join_path(
        app: AppContext,
        from_table: str,
        to_table: str,
        from_schema: str = default_schema,
        to_schema: str = default_schema,
        max_depth: Annotated[int, Field(ge=1, le=MAX_DEPTH)] = MAX_DEPTH,
        diagram: bool = False,
    ) -> Annotated[CallToolResult, FindJoinPathOutput]:
        from_schema, from_table = await resolve_table(app, from_schema, from_table, default_schema)
        to_schema, to_table = await resolve_table(app, to_schema, to_table, default_schema)
        start, goal = (from_schema, from_table), (to_schema, to_table)
        graph, found, ratios = await app.db.run(
            lambda conn: app.graph.search(conn, start, goal, max_depth), own=True
        )
        if not found.paths:
            names = (f"{from_schema}.{from_table}", f"{to_schema}.{to_table}")
            raise no_path(graph, found.start, found.goal, names, max_depth)
        orphans = await _orphans(app, found.shown)
        shown = []
        for path in found.shown:
            notes, warning = fan_out_notes(graph, path, ratios)
            shown.append(
                JoinPath(
                    depth=len(path),
                    sql_example=join_sql(graph, found.start, start, path),
                    steps=[edge.key.constraint_name for edge in path],
                    fan_out=notes,
                    warning=warning,
                    not_valid=unchecked_notes(graph, path, orphans),
                )
            )
        drawn = None
        if diagram:
            on_path = sorted(
                {oid for path in found.shown for e in path for oid in (e.start, e.end)}
            )
            drawn = await app.db.run(
                lambda conn: erd.path_diagram(conn, from_schema, on_path), own=True
            )
        return ok(
            FindJoinPathOutput(
                from_table=from_table,
                to_table=to_table,
                paths=shown,
                paths_found=len(found.paths),
                note=_note(found.paths, len(shown), found.capped),
                diagram=drawn.mermaid if drawn is not None else None,
            )
        )

    return [
        make_tool(
            get_foreign_keys,
            name="get_foreign_keys",
            title="Get foreign keys",
            description=GET_FOREIGN_KEYS,
        ),
        make_tool(
            find_join_path,
            name="find_join_path",
            title="Find join path",
            description=FIND_JOIN_PATH,
        ),
    ]


async def _orphans(app: AppContext, paths: list[Path]) -> dict[str, int | None]:
    """How many rows break each NOT VALID key the paths use, where the referencing table is
    small enough to read (one statement for all, through the gate a caller's query passes);
    a key whose count the gate refuses or PostgreSQL fails is left uncounted."""
    keys = [k for k in unchecked_keys(paths) if countable(k)]
    if not keys:
        return {}
    sql = orphans_sql(keys)
    try:
        got = await app.db.run(
            lambda conn: app.reader.read(conn, sql, limit=1, max_text=100), explicit=True
        )
    except (PgMcpError, asyncpg.PostgresError):  # refused, no privilege, timed out ...
        return {}
    return {k.constraint_name: int(n) for k, n in zip(keys, got.rows[0], strict=True)}


def _note(paths: list[Path], shown: int, capped: bool) -> str | None:
    shortest = len(paths[0])
    if not shortest:
        return "same table: no join needed"
    if len(paths) == shown:
        return None
    longer = sum(1 for p in paths if len(p) > shortest)
    more = f"more than {PATH_CAP}" if capped else str(len(paths))
    return (
        f"{more} paths: {len(paths) - longer} of {shortest} joins (showing {shown}), "
        f"{longer} of {shortest + 1}"
    )

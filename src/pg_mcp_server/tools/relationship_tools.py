"""Layer 2, relationships: get_foreign_keys and find_join_path."""

from __future__ import annotations

from typing import Annotated

from mcp_types import CallToolResult
from pydantic import Field

from pg_mcp_server.app import AppContext
from pg_mcp_server.database.catalog import (
    MAX_DEPTH,
    PATH_CAP,
    Path,
    fan_out_notes,
    foreign_keys_of,
    join_sql,
    no_path,
)
from pg_mcp_server.models.relationships import (
    FindJoinPathOutput,
    ForeignKeyRelation,
    GetForeignKeysOutput,
    JoinPath,
)
from pg_mcp_server.tools.registry import ToolDef, make_tool, ok

GET_FOREIGN_KEYS = """A table's foreign keys both ways: outgoing (it references) and incoming
(others reference it), column pairs in key order. Keys of partitions are on their parent.
Example: get_foreign_keys(table_name="orders")"""

FIND_JOIN_PATH = """How to join two tables by foreign keys: the shortest paths, each with
sql_example (runs as-is after a SELECT list), steps (each join's key), fan_out (joins that
multiply rows, with the measured ratio) and warning (what that does to sums over the first
table). Example: find_join_path(from_table="payment", to_table="film")"""


def relationship_tools(default_schema: str) -> list[ToolDef]:
    async def get_foreign_keys(
        app: AppContext, table_name: str, schema_name: str = default_schema
    ) -> Annotated[CallToolResult, GetForeignKeysOutput]:
        outgoing, incoming = await app.db.run(
            lambda conn: foreign_keys_of(conn, schema_name, table_name), own=True
        )
        return ok(
            GetForeignKeysOutput(
                table_name=table_name,
                schema_name=schema_name,
                outgoing=[ForeignKeyRelation(**k.relation()) for k in outgoing],
                incoming=[ForeignKeyRelation(**k.relation()) for k in incoming],
                outgoing_count=len(outgoing),
                incoming_count=len(incoming),
            )
        )

    async def find_join_path(
        app: AppContext,
        from_table: str,
        to_table: str,
        from_schema: str = default_schema,
        to_schema: str = default_schema,
        max_depth: Annotated[int, Field(ge=1, le=MAX_DEPTH)] = MAX_DEPTH,
    ) -> Annotated[CallToolResult, FindJoinPathOutput]:
        start, goal = (from_schema, from_table), (to_schema, to_table)
        graph, found, ratios = await app.db.run(
            lambda conn: app.graph.search(conn, start, goal, max_depth), own=True
        )
        if not found.paths:
            names = (f"{from_schema}.{from_table}", f"{to_schema}.{to_table}")
            raise no_path(graph, found.start, found.goal, names, max_depth)
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
                )
            )
        return ok(
            FindJoinPathOutput(
                from_table=from_table,
                to_table=to_table,
                paths=shown,
                paths_found=len(found.paths),
                note=_note(found.paths, len(shown), found.capped),
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

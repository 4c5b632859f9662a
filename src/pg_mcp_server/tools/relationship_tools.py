"""Layer 2, relationships: get_foreign_keys and find_join_path."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult
from pydantic import Field

from pg_mcp_server.app import app_context
from pg_mcp_server.database.joinpaths import (
    MAX_DEPTH,
    PATH_CAP,
    Edge,
    Path,
    join_sql,
    join_types,
    no_path,
)
from pg_mcp_server.database.relationships import foreign_keys_of
from pg_mcp_server.models.relationships import (
    FindJoinPathOutput,
    ForeignKeyRelation,
    GetForeignKeysOutput,
    JoinPath,
    JoinStep,
)
from pg_mcp_server.tools.registry import PgTool, make_tool, ok

SHOWN_PATHS = 5

GET_FOREIGN_KEYS = """List a table's foreign keys in both directions: `outgoing` (tables this
table references) and `incoming` (tables that reference it), with column pairs in key order
and ON UPDATE / ON DELETE rules. Keys declared on partitions are reported on the partitioned
table. Use it to see what a table joins to; find_join_path finds multi-step routes.
Example: get_foreign_keys(table_name="orders") -> {"outgoing": [{"constraint_name":
"orders_user_id_fkey", "from_table": "orders", "from_columns": ["user_id"], "to_table":
"users", "to_columns": ["id"], "on_update": "NO ACTION", "on_delete": "CASCADE", ...}],
"incoming": [{"from_table": "order_items", "from_columns": ["order_id"], ...}], ...}"""

FIND_JOIN_PATH = """Find how to join two tables through foreign keys: the shortest paths
(walking keys in either direction), each with its steps and a ready-to-run JOIN clause.
`sql_example` is a complete FROM ... JOIN ... ON ... clause with short aliases; put a SELECT
list in front of it (e.g. "SELECT count(*) " + sql_example). INNER JOIN is suggested when every
row must have a match (NOT NULL key followed to its target), LEFT JOIN from the first step
where rows may have no match (and after it, so the starting rows are kept).
Example: find_join_path(from_table="order_items", to_table="users") -> {"paths": [{"depth": 2,
"steps": [...], "sql_example": "FROM public.order_items oi INNER JOIN public.orders o ON
oi.order_id = o.id INNER JOIN public.users u ON o.user_id = u.id"}], "paths_found": 1, ...}"""


def relationship_tools(default_schema: str) -> list[PgTool]:
    async def get_foreign_keys(
        ctx: Context,
        table_name: Annotated[str, Field(description="Name of the table")],
        schema_name: Annotated[
            str, Field(description="Schema containing the table")
        ] = default_schema,
    ) -> Annotated[CallToolResult, GetForeignKeysOutput]:
        app = app_context(ctx)
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
        ctx: Context,
        from_table: Annotated[str, Field(description="Starting table name")],
        to_table: Annotated[str, Field(description="Target table name")],
        from_schema: Annotated[str, Field(description="Schema of starting table")] = default_schema,
        to_schema: Annotated[str, Field(description="Schema of target table")] = default_schema,
        max_depth: Annotated[
            int, Field(ge=1, le=MAX_DEPTH, description="Maximum number of joins to traverse")
        ] = 4,
    ) -> Annotated[CallToolResult, FindJoinPathOutput]:
        app = app_context(ctx)
        start, goal = (from_schema, from_table), (to_schema, to_table)
        graph, start_oid, goal_oid = await app.db.run(
            lambda conn: app.graph.load(conn, start, goal), own=True
        )
        paths, capped = graph.paths(start_oid, goal_oid, max_depth)
        if not paths:
            names = (f"{from_schema}.{from_table}", f"{to_schema}.{to_table}")
            raise no_path(graph, start_oid, goal_oid, names, max_depth)
        shown = [
            JoinPath(
                steps=[
                    _step(graph.names, e, join)
                    for e, join in zip(path, join_types(path), strict=True)
                ],
                depth=len(path),
                sql_example=join_sql(graph, start, path),
            )
            for path in paths[:SHOWN_PATHS]
        ]
        return ok(
            FindJoinPathOutput(
                from_table=from_table,
                to_table=to_table,
                paths=shown,
                paths_found=len(paths),
                note=_note(paths, shown, capped, max_depth),
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


def _step(names: dict[int, tuple[str, str]], edge: Edge, join_type: str) -> JoinStep:
    from_schema, from_table = names[edge.start]
    to_schema, to_table = names[edge.end]
    return JoinStep(
        from_table=from_table,
        from_schema=from_schema,
        from_column=", ".join(edge.start_columns),
        to_table=to_table,
        to_schema=to_schema,
        to_column=", ".join(edge.end_columns),
        join_type=join_type,
        constraint_name=edge.key.constraint_name,
        from_columns=list(edge.start_columns),
        to_columns=list(edge.end_columns),
        direction="forward" if edge.forward else "reverse",
    )


def _note(paths: list[Path], shown: list[JoinPath], capped: bool, max_depth: int) -> str | None:
    if len(paths) == 1:
        return None if paths[0] else "same table: no join needed"
    total = f"more than {PATH_CAP}" if capped else str(len(paths))
    return (
        f"{total} paths of at most {max_depth} joins; showing the {len(shown)} shortest "
        f"(shortest: {len(paths[0])} joins)"
    )

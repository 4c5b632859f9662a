"""What every tool call gets from the lifespan: settings, the pool, the guard's cache."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from mcp.server.mcpserver import Context

from pg_mcp_server.config import Settings
from pg_mcp_server.database.audit import RoleAudit
from pg_mcp_server.database.catalog import SnapshotCache
from pg_mcp_server.database.engine import Database
from pg_mcp_server.database.guard import SqlGuard
from pg_mcp_server.database.joinpaths import GraphCache
from pg_mcp_server.database.queries import Shapes


@dataclass
class AppContext:
    settings: Settings
    db: Database
    guard: SqlGuard = field(default_factory=SqlGuard)
    graph: GraphCache = field(default_factory=GraphCache)
    # describe_table answers, reused while nothing has committed since (see SnapshotCache).
    described: SnapshotCache = field(default_factory=SnapshotCache)
    sensitive: re.Pattern[str] | None = None
    # Described statements (execute_query, get_sample_rows), see queries.Shapes.
    shapes: Shapes = field(default_factory=Shapes)
    audit: RoleAudit | None = None  # the start-up role audit, while it runs in the background


def app_context(ctx: Context[Any, Any]) -> AppContext:
    app = ctx.request_context.lifespan_context
    assert isinstance(app, AppContext)
    return app

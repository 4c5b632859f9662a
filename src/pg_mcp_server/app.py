"""What every tool call gets from the lifespan: settings, the pool, the guard's cache.

The pool, the guard and the caches are made on first use, not when the lifespan starts: their
modules (SQLAlchemy, pglast) are most of the server's start-up, and `initialize` needs none
of them (see server.py).
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import TYPE_CHECKING, Any

from mcp.server.mcpserver import Context

from pg_mcp_server.config import Settings

if TYPE_CHECKING:
    from pg_mcp_server.database.catalog import GraphCache, SnapshotCache
    from pg_mcp_server.database.guard import SqlGuard
    from pg_mcp_server.database.pool import Database, RoleAudit
    from pg_mcp_server.database.rows import Reader, Shapes


class AppContext:
    def __init__(
        self,
        settings: Settings,
        db: Database | None = None,
        *,
        sensitive: re.Pattern[str] | None = None,
        audit: RoleAudit | None = None,
    ) -> None:
        self.settings = settings
        self.sensitive = sensitive
        self.audit = audit  # the start-up role audit, while it runs in the background
        self.owns_db = db is None  # then close() disposes of the pool it made
        if db is not None:
            self.db = db

    @cached_property
    def db(self) -> Database:
        from pg_mcp_server.database.pool import Database

        return Database(
            self.settings.database,
            allow_privileged=self.settings.server.allow_privileged_role,
        )

    @cached_property
    def guard(self) -> SqlGuard:
        from pg_mcp_server.database.guard import SqlGuard

        server = self.settings.server
        return SqlGuard(
            strict_comments=server.block_keywords_in_comments,
            trusted_roles=tuple(server.trusted_roles),
            allow_foreign_tables=server.allow_foreign_tables,
        )

    @cached_property
    def graph(self) -> GraphCache:
        from pg_mcp_server.database.catalog import GraphCache

        return GraphCache()

    @cached_property
    def described(self) -> SnapshotCache:
        """describe_table answers, reused while nothing has committed since."""
        from pg_mcp_server.database.catalog import SnapshotCache

        return SnapshotCache()

    @cached_property
    def shapes(self) -> Shapes:
        """Described statements (execute_query, get_sample_rows, explain_query), see
        rows/reader.py's Shapes."""
        from pg_mcp_server.database.rows import Shapes

        return Shapes()

    @cached_property
    def reader(self) -> Reader:
        """How every tool reads rows: the pool, the guard, the budget and the redaction
        pattern in one object (see rows/reader.py)."""
        from pg_mcp_server.database.rows import Budget, Reader

        server = self.settings.server
        budget = Budget(rows=server.max_rows, bytes=server.max_result_bytes)
        return Reader(self.db, self.guard, budget, sensitive=self.sensitive, shapes=self.shapes)

    async def close(self) -> None:
        """Dispose of the pool if it is ours and was made."""
        if self.owns_db and "db" in vars(self):
            await self.db.dispose()


def app_context(ctx: Context[Any, Any]) -> AppContext:
    app = ctx.request_context.lifespan_context
    assert isinstance(app, AppContext)
    return app

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
    from pg_mcp_server.identity import AuthSettings
    from pg_mcp_server.results.history import History
    from pg_mcp_server.results.store import ResultStore


class AppContext:
    def __init__(
        self,
        settings: Settings,
        db: Database | None = None,
        *,
        sensitive: re.Pattern[str] | None = None,
        audit: RoleAudit | None = None,
        name: str = "default",
        auth: AuthSettings | None = None,
    ) -> None:
        self.settings = settings
        self.name = name  # the database's name (configfile.DEFAULT_NAME without a file)
        # With several databases, the lifespan's context also holds every database's own
        # (see Hub); None for one database.
        self.hub: Hub | None = None
        self.sensitive = sensitive
        self.audit = audit  # the start-up role audit, while it runs in the background
        self.owns_db = db is None  # then close() disposes of the pool it made
        self.auth = auth  # which settings carry a caller's name and claims (identity/)
        if db is not None:
            self.db = db

    @cached_property
    def db(self) -> Database:
        from pg_mcp_server.database.pool import Database

        return Database(
            self.settings.database,
            name=self.name,
            allow_privileged=self.settings.server.allow_privileged_role,
            auth=self.auth,
        )

    @cached_property
    def guard(self) -> SqlGuard:
        from pg_mcp_server.database.guard import SqlGuard

        server = self.settings.server
        return SqlGuard(
            strict_comments=server.block_keywords_in_comments,
            trusted_roles=tuple(server.trusted_roles),
            allow_foreign_tables=server.allow_foreign_tables,
            allow_open_schema_code=server.allow_open_schema_code,
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
        # A result is read whole before it is paged, and held whole: never more than the
        # store may hold.
        most = min(server.max_result_bytes, server.result_store_bytes)
        budget = Budget(rows=server.max_rows, bytes=most)
        return Reader(self.db, self.guard, budget, sensitive=self.sensitive, shapes=self.shapes)

    @cached_property
    def results(self) -> ResultStore:
        """Where paged results are held (MCP_RESULT_STORE; results/)."""
        from pg_mcp_server.results import open_store

        return open_store(self.settings.server)

    @cached_property
    def history(self) -> History:
        """The statements execute_query ran, per caller (pg://queries/recent)."""
        from pg_mcp_server.results.history import History

        return History()

    async def close(self) -> None:
        """Let go of the result store, and dispose of the pool if it is ours; each only if
        it was made."""
        if "results" in vars(self):
            await self.results.close()
        if self.owns_db and "db" in vars(self):
            await self.db.dispose()


class Hub:
    """Every database's AppContext, by name, for a server with several databases: each has
    its own pool (opened at its first use, as with one database), guard, caches, reader and
    settings; the paged results and the query history are one store for all (a page is read
    back without naming its database)."""

    def __init__(self, apps: dict[str, AppContext]) -> None:
        self.apps = apps
        first = next(iter(apps.values()))
        for app in apps.values():
            app.hub = self
            if app is not first:
                app.results = first.results
                app.history = first.history
        self.first = first

    async def close(self) -> None:
        """The shared store once, then every pool that was opened."""
        await self.first.close()
        for app in self.apps.values():
            if app is not self.first and app.owns_db and "db" in vars(app):
                await app.db.dispose()


class Pools:
    """Several databases' pools as the HTTP gateway uses one (cancel, ping, dispose)."""

    def __init__(self, dbs: dict[str, Database]) -> None:
        self.dbs = dbs

    async def cancel(self, backends: set[int]) -> None:
        for db in self.dbs.values():
            if mine := backends & db.server_pids():
                await db.cancel(mine)

    async def ping(self) -> None:
        """DatabaseConnectionError naming (in its context) every database that did not
        answer; the gateway's /health answers 503 with those names."""
        import anyio

        from pg_mcp_server.errors import DatabaseConnectionError, PgMcpError

        down: list[str] = []

        async def one(name: str, db: Database) -> None:
            try:
                await db.ping()
            except PgMcpError:
                down.append(name)

        async with anyio.create_task_group() as tasks:
            for name, db in self.dbs.items():
                tasks.start_soon(one, name, db)
        if down:
            raise DatabaseConnectionError(
                f"Not reachable: {', '.join(sorted(down))}.", context={"down": sorted(down)}
            )

    async def dispose(self) -> None:
        for db in self.dbs.values():
            await db.dispose()


def app_context(ctx: Context[Any, Any]) -> AppContext:
    app = ctx.request_context.lifespan_context
    assert isinstance(app, AppContext)
    return app

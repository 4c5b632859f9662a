"""Connection pool and the read-only transaction every tool runs in.

SQLAlchemy's async engine owns pooling (size, timeout, pre-ping); the work itself runs on the
pooled asyncpg connection, so queries use asyncpg's extended protocol (one prepared statement
per message). The engine is in AUTOCOMMIT mode so that SQLAlchemy starts no transaction of its
own (and its pre-ping is a single `;`): we open `BEGIN READ ONLY` ourselves, set the statement
timeout for that transaction only, and always roll back.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any

import asyncpg
import sqlalchemy.exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from pg_mcp_server.config import APPLICATION_NAME, DatabaseSettings
from pg_mcp_server.errors import (
    ColumnNotFoundError,
    DatabaseConnectionError,
    InvalidSqlError,
    ParameterError,
    PermissionDeniedError,
    PgMcpError,
    QueryTimeoutError,
    TableNotFoundError,
    WriteOperationDeniedError,
)

logger = logging.getLogger(__name__)

# Our own constant text, never user SQL, so the simple protocol's multi-statement message is
# fine here: it saves a round trip per call.
_BEGIN = "BEGIN READ ONLY; SET LOCAL statement_timeout = {ms}"
# Roll back, then reset what a rollback does not undo before the connection is reused:
# session advisory locks, LISTEN registrations and session-level settings.
_END = "ROLLBACK; SELECT pg_catalog.pg_advisory_unlock_all(); UNLISTEN *; RESET ALL"


# The backends working for the current request (set by the HTTP gateway per request and
# inherited by the tasks that serve it), so a request whose client went away can have its
# queries cancelled.
request_backends: ContextVar[set[int] | None] = ContextVar("request_backends", default=None)


class Database:
    """The pool plus the one way to use it: `async with db.read_only() as conn`."""

    def __init__(self, settings: DatabaseSettings) -> None:
        self.settings = settings
        # No pool_pre_ping: the BEGIN that every use starts with is the ping (see _begin),
        # which saves a round trip per call.
        self.engine: AsyncEngine = create_async_engine(
            "postgresql+asyncpg://",
            async_creator=self._connect,
            pool_size=settings.pool_size,
            max_overflow=0,
            pool_timeout=settings.pool_timeout,
            isolation_level="AUTOCOMMIT",
        )
        self._releasing: set[asyncio.Task[None]] = set()

    async def _connect(self) -> asyncpg.Connection:
        conn = await asyncpg.connect(
            **self.settings.connect_kwargs(),
            timeout=self.settings.pool_timeout,
            server_settings={"application_name": APPLICATION_NAME},
        )
        # asyncpg turns intervals into timedelta, which folds months into 30 days; the
        # server's own text ("1 mon 2 days 03:00:00") is exact.
        await conn.set_type_codec(
            "interval", schema="pg_catalog", encoder=str, decoder=str, format="text"
        )
        return conn

    def timeout_ms(self, requested: int | None = None) -> int:
        """The caller may lower the server's statement timeout, never raise it."""
        limit = self.settings.statement_timeout
        if requested is None or requested <= 0:
            return limit
        return min(int(requested), limit)

    async def _begin(self, ms: int) -> tuple[AsyncConnection, asyncpg.Connection]:
        """Check out a connection and open the read-only transaction. The BEGIN is also the
        pool's liveness check: a pooled connection that died (server restart, idle timeout)
        fails here, is discarded, and is replaced once by a new one."""
        for attempt in (1, 2):
            sa_conn = await self.engine.connect()
            try:
                conn = await _driver_connection(sa_conn)
                await conn.execute(_BEGIN.format(ms=ms))
                return sa_conn, conn
            except Exception:
                # Whatever went wrong (closed socket, a terminated backend, a driver left in
                # a bad state), this connection is done for; a new one gets one more try.
                await _discard(sa_conn)
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _release(self, sa_conn: AsyncConnection, conn: asyncpg.Connection) -> None:
        """Roll back and reset in the background: the caller has its answer already, and a
        cancelled call cannot interrupt the clean-up. dispose() waits for what is pending."""
        task = asyncio.get_running_loop().create_task(_end(sa_conn, conn))
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)

    @asynccontextmanager
    async def read_only(self, timeout_ms: int | None = None) -> AsyncIterator[asyncpg.Connection]:
        """A pooled connection inside `BEGIN READ ONLY`, rolled back whatever happens.

        Database failures inside the block come out as `PgMcpError`s (see `translate`).
        """
        ms = self.timeout_ms(timeout_ms)
        try:
            sa_conn, conn = await self._begin(ms)
        except Exception as exc:
            raise _mapped(exc, ms) from None
        backends = request_backends.get()
        pid = conn.get_server_pid()
        if backends is not None:
            backends.add(pid)
        try:
            yield conn
        except PgMcpError:
            raise
        except Exception as exc:
            raise _mapped(exc, ms) from None
        finally:
            if backends is not None:
                backends.discard(pid)
            self._release(sa_conn, conn)

    async def cancel(self, backends: set[int]) -> None:
        """Cancel what these backends are running (a role may always cancel its own)."""
        if backends:
            async with self.read_only() as conn:
                await conn.execute(
                    "SELECT pg_catalog.pg_cancel_backend(pid) FROM unnest($1::int[]) AS pid",
                    sorted(backends),
                )

    async def ping(self) -> None:
        async with self.read_only() as conn:
            await conn.fetchval("SELECT 1")

    async def dispose(self) -> None:
        if self._releasing:
            await asyncio.gather(*self._releasing, return_exceptions=True)
        await self.engine.dispose()


def _mapped(exc: Exception, ms: int) -> Exception:
    if isinstance(exc, PgMcpError):
        return exc
    return translate(exc, timeout_ms=ms) or exc


async def _driver_connection(sa_conn: AsyncConnection) -> asyncpg.Connection:
    raw = await sa_conn.get_raw_connection()
    driver = raw.driver_connection
    assert isinstance(driver, asyncpg.Connection)
    return driver


async def _end(sa_conn: AsyncConnection, conn: asyncpg.Connection) -> None:
    """Roll back, reset, and return the connection to the pool; a connection that cannot
    (lost, or cancelled mid-query) is discarded instead."""
    try:
        if not conn.is_closed():
            await conn.execute(_END)
            await sa_conn.close()
            return
    except Exception:
        logger.warning("rollback failed; discarding the connection", exc_info=True)
    await _discard(sa_conn)


async def _discard(sa_conn: AsyncConnection) -> None:
    """Drop a connection from the pool; closing a broken one must not raise in turn."""
    try:
        await sa_conn.invalidate()
        await sa_conn.close()
    except Exception:
        logger.debug("discarding a broken connection raised", exc_info=True)


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception, what SQLAlchemy wrapped (`orig`) and the causes, in order."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        item = todo.pop(0)
        if item is None or item in seen:
            continue
        seen.append(item)
        todo += [getattr(item, "orig", None), item.__cause__, item.__context__]
    return seen


def _pg_context(err: asyncpg.PostgresError) -> dict[str, Any]:
    ctx: dict[str, Any] = {"sqlstate": err.sqlstate}
    for key in ("detail", "hint", "position"):
        value = getattr(err, key, None)
        if value:
            ctx[key] = value
    return ctx


def translate(exc: BaseException, *, timeout_ms: int | None = None) -> PgMcpError | None:
    """Map a driver, pool or network failure to its PRD error; None if it is none of those.

    Messages are written here, not copied from connection errors, so no DSN, host list or
    password can leak; PostgreSQL's own messages about a statement are passed on.
    """
    chain = _chain(exc)
    for err in chain:
        if isinstance(err, sqlalchemy.exc.TimeoutError):
            return DatabaseConnectionError(
                "No database connection became free in time: the pool is busy.",
                suggestion="Retry shortly, or raise PG_POOL_SIZE / PG_POOL_TIMEOUT.",
            )
        if isinstance(err, asyncpg.QueryCanceledError):
            return QueryTimeoutError(
                f"The statement was cancelled after {timeout_ms} ms (statement timeout)."
                if timeout_ms
                else "The statement was cancelled.",
                context={"timeout_ms": timeout_ms} if timeout_ms else None,
            )
        if isinstance(err, asyncpg.InvalidAuthorizationSpecificationError):
            return DatabaseConnectionError(
                "The database rejected the credentials.",
                suggestion="Check PG_USER / PG_PASSWORD (or the DSN).",
            )
        if isinstance(err, asyncpg.InvalidCatalogNameError):
            return DatabaseConnectionError(
                "The configured database does not exist.",
                suggestion="Check PG_DATABASE (or the database in the DSN).",
            )
        if isinstance(err, asyncpg.DataError):
            # Raised by the driver while encoding a bound value, before anything is sent.
            return ParameterError(
                f"A parameter value does not fit its type: {err}",
                suggestion="Check each value in `params` against its $n placeholder's type.",
            )
        if isinstance(
            err,
            asyncpg.PostgresConnectionError
            | asyncpg.OperatorInterventionError
            | asyncpg.TooManyConnectionsError
            | asyncpg.InternalClientError,
        ) or (isinstance(err, asyncpg.InterfaceError) and "connection" in str(err).lower()):
            return DatabaseConnectionError("The database connection was lost or refused.")
        if isinstance(err, asyncpg.IndeterminateDatatypeError):
            return ParameterError(
                f"{err.message}: every $n up to the highest must be used in the query.",
                suggestion="Number placeholders $1, $2, ... without gaps, or add a cast "
                "such as $1::int where the type cannot be inferred.",
                context=_pg_context(err),
            )
        if isinstance(err, asyncpg.InsufficientPrivilegeError):
            return PermissionDeniedError(err.message, context=_pg_context(err))
        if isinstance(err, asyncpg.ReadOnlySQLTransactionError):
            return WriteOperationDeniedError(
                f"PostgreSQL refused a write in the read-only transaction: {err.message}",
                context=_pg_context(err),
            )
        if isinstance(err, asyncpg.UndefinedColumnError):
            return ColumnNotFoundError(err.message, context=_pg_context(err))
        if isinstance(err, asyncpg.UndefinedTableError):
            return TableNotFoundError(err.message, context=_pg_context(err))
        if isinstance(err, asyncpg.PostgresError):
            return InvalidSqlError(err.message or str(err), context=_pg_context(err))
    for err in chain:
        if isinstance(err, socket.gaierror):
            return DatabaseConnectionError("The database host name could not be resolved.")
        if isinstance(err, ConnectionRefusedError):
            return DatabaseConnectionError("The database refused the connection (is it running?).")
        if isinstance(err, TimeoutError):
            return DatabaseConnectionError("Connecting to the database timed out.")
        if isinstance(err, OSError | sqlalchemy.exc.DBAPIError):
            return DatabaseConnectionError("The database could not be reached.")
    return None

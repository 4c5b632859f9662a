"""Connection pool and the two ways a tool uses a connection.

SQLAlchemy's async engine owns pooling (size, timeout); the work itself runs on the pooled
asyncpg connection, so queries use asyncpg's extended protocol (one prepared statement per
message). The engine is in AUTOCOMMIT mode so that SQLAlchemy starts no transaction of its own.

Every pooled session is read-only (`default_transaction_read_only`) with the server's statement
timeout from the moment it opens, and is put back that way after each use. On top of that:

- `read_only()` is for anything that runs SQL a caller wrote (execute_query, explain_query,
  a sample's WHERE clause): an explicit `BEGIN READ ONLY` with `SET LOCAL statement_timeout`,
  always rolled back. `run()` (execute_query) sends that BEGIN in the same flight as the
  statement's Bind/Execute (`fetch_page`), so a cached statement costs one round trip.
- `catalog()` is for our own constant statements (catalog reads with bound parameters): they
  run in their own implicit read-only transaction, so a cached statement is one round trip.

After either, in the background, the session is rolled back if needed and reset (advisory
locks, LISTEN, every setting), then made read-only again before the pool can hand it out; a
session that cannot be reset is discarded.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import struct
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

import asyncpg
import sqlalchemy.exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from pg_mcp_server.config import APPLICATION_NAME, DatabaseSettings
from pg_mcp_server.database.pinned import pin
from pg_mcp_server.errors import (
    ColumnNotFoundError,
    ConnectionLostError,
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
T = TypeVar("T")

# Our own constant text, never user SQL, so the simple protocol's multi-statement message is
# fine here: one round trip each. (SET, not startup parameters: poolers such as PgBouncer
# refuse or drop startup parameters they do not know.)
_SESSION = "SET default_transaction_read_only = on; SET statement_timeout = {ms}"
_BEGIN_STATEMENTS = ("BEGIN READ ONLY", "SET LOCAL statement_timeout = {ms}")
_BEGIN = "; ".join(_BEGIN_STATEMENTS)
# Before reuse: refuse a session where SQL-level PREPARE left a statement behind (the guard
# never lets one through; this is the backstop), drop session advisory locks and LISTEN
# registrations, reset every setting, then set the session up again (RESET ALL undid that
# too). A rollback goes first when a transaction is open (see _end).
_RESET = (
    "SELECT 1 / (NOT EXISTS (SELECT FROM pg_catalog.pg_prepared_statements WHERE from_sql))"
    "::pg_catalog.int4, pg_catalog.pg_advisory_unlock_all(); UNLISTEN *; RESET ALL; " + _SESSION
)


# The backends working for the current request (set by the HTTP gateway per request and
# inherited by the tasks that serve it), so a request whose client went away can have its
# queries cancelled.
request_backends: ContextVar[set[int] | None] = ContextVar("request_backends", default=None)


class Database:
    """The pool plus the one way to use it: `async with db.read_only() as conn`."""

    def __init__(self, settings: DatabaseSettings) -> None:
        self.settings = settings
        # No pool_pre_ping: it would cost a round trip per call. A connection the server
        # closed is seen as closed at checkout (see _checkout) and replaced.
        self.engine: AsyncEngine = create_async_engine(
            "postgresql+asyncpg://",
            async_creator=self._connect,
            pool_size=settings.pool_size,
            max_overflow=0,
            pool_timeout=settings.pool_timeout,
            isolation_level="AUTOCOMMIT",
        )
        self._releasing: set[asyncio.Task[None]] = set()
        self._session = _SESSION.format(ms=settings.statement_timeout)
        self._reset = pin(_RESET.format(ms=settings.statement_timeout))
        # Connections that served a call before: one of those found dead may be retried.
        self._used: weakref.WeakSet[asyncpg.Connection] = weakref.WeakSet()
        # Bumped when a cached statement went stale; see _use and _checkout.
        self._cache_epoch = 0
        self._epochs: weakref.WeakKeyDictionary[asyncpg.Connection, int] = (
            weakref.WeakKeyDictionary()
        )

    async def _connect(self) -> asyncpg.Connection:
        conn = await asyncpg.connect(
            **self.settings.connect_kwargs(),
            timeout=self.settings.pool_timeout,
            server_settings={"application_name": APPLICATION_NAME},
        )
        try:
            # asyncpg turns intervals into timedelta, which folds months into 30 days; the
            # server's own text ("1 mon 2 days 03:00:00") is exact.
            await conn.set_type_codec(
                "interval", schema="pg_catalog", encoder=str, decoder=str, format="text"
            )
            await conn.execute(self._session)
        except BaseException:
            conn.terminate()
            raise
        return conn

    def timeout_ms(self, requested: int | None = None) -> int:
        """The caller may lower the server's statement timeout, never raise it."""
        limit = self.settings.statement_timeout
        if requested is None or requested <= 0:
            return limit
        return min(int(requested), limit)

    async def _checkout(self) -> tuple[AsyncConnection, asyncpg.Connection]:
        """A pooled connection. One the server has closed meanwhile (restart,
        pg_terminate_backend, idle timeout), or one found inside a transaction, is discarded
        and replaced."""
        for _ in range(self.settings.pool_size + 1):
            sa_conn = await self.engine.connect()
            try:
                conn = await _driver_connection(sa_conn)
            except Exception:
                await _discard(sa_conn)
                raise
            # A session still inside a transaction must never be handed out (_end rolls back
            # before reuse; this is the backstop): it would hold its locks and stale now().
            if not conn.is_closed() and not conn.is_in_transaction():
                if self._epochs.get(conn, 0) != self._cache_epoch:
                    conn._drop_local_statement_cache()
                    self._epochs[conn] = self._cache_epoch
                return sa_conn, conn
            await _discard(sa_conn)
        raise DatabaseConnectionError("The database connection was lost or refused.")

    async def _begin(self, ms: int) -> tuple[AsyncConnection, asyncpg.Connection]:
        """Check out a connection and open the read-only transaction. The BEGIN is also a
        liveness check: a connection that died unnoticed fails here, is discarded, and is
        replaced once by a new one."""
        for attempt in (1, 2):
            sa_conn, conn = await self._checkout()
            try:
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
        task = asyncio.get_running_loop().create_task(_end(sa_conn, conn, self._reset))
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)

    async def _deferred_begin(self, ms: int) -> tuple[AsyncConnection, asyncpg.Connection]:
        """Check out a connection whose `BEGIN READ ONLY` goes out with its first statement
        (see `fetch_page`)."""
        sa_conn, conn = await self._checkout()
        _deferred[conn] = ms
        return sa_conn, conn

    @asynccontextmanager
    async def read_only(
        self, timeout_ms: int | None = None, *, deferred: bool = False
    ) -> AsyncIterator[asyncpg.Connection]:
        """A pooled connection inside `BEGIN READ ONLY`, rolled back whatever happens: the
        way to run SQL a caller wrote.

        `deferred`: the BEGIN is not sent yet; the block's first statement must run through
        `fetch_page`, which sends the BEGIN in the same flight. (Our own catalog reads and the
        Parse/Describe of a statement may come first: they execute nothing a caller wrote.)

        Database failures inside the block come out as `PgMcpError`s (see `translate`).
        """
        ms = self.timeout_ms(timeout_ms)
        acquire = self._deferred_begin(ms) if deferred else self._begin(ms)
        async with self._use(acquire, ms) as conn:
            yield conn

    @asynccontextmanager
    async def catalog(self) -> AsyncIterator[asyncpg.Connection]:
        """A pooled read-only session with no transaction of its own: the way to run our own
        constant statements (each is its own read-only transaction, under the server's
        statement timeout). Never for SQL a caller wrote: use `read_only()`."""
        async with self._use(self._checkout(), self.settings.statement_timeout) as conn:
            yield conn

    @asynccontextmanager
    async def _use(
        self, acquire: Awaitable[tuple[AsyncConnection, asyncpg.Connection]], ms: int
    ) -> AsyncIterator[asyncpg.Connection]:
        try:
            sa_conn, conn = await acquire
        except Exception as exc:
            raise _mapped(exc, ms) from None
        reused = conn in self._used
        self._used.add(conn)
        backends = request_backends.get()
        pid = conn.get_server_pid()
        if backends is not None:
            backends.add(pid)
        try:
            yield conn
        except PgMcpError:
            raise
        except (asyncpg.InvalidCachedStatementError, asyncpg.InvalidSQLStatementNameError) as exc:
            # A cached statement no longer fits its tables (or is gone). Other connections may
            # hold the same one: every connection drops its statement cache before its next use
            # (asyncpg does this only inside its own pool).
            self._cache_epoch += 1
            raise StatementChangedError(exc.message, context=_pg_context(exc)) from None
        except Exception as exc:
            mapped = _mapped(exc, ms)
            if isinstance(mapped, DatabaseConnectionError) and conn.is_closed() and reused:
                raise ConnectionLostError(mapped.message) from None
            raise mapped from None
        finally:
            if backends is not None:
                backends.discard(pid)
            self._release(sa_conn, conn)

    async def run(
        self, work: Callable[[asyncpg.Connection], Awaitable[T]], timeout_ms: int | None = None
    ) -> T:
        """`work(conn)` inside `read_only(deferred=True)` (so work's statement runs through
        `fetch_page`), run once more in a new transaction if one of the connection's cached
        statements no longer fits its tables (a `SELECT *` prepared before an ALTER TABLE:
        PostgreSQL refuses it, and the transaction is aborted)."""
        for attempt in (1, 2):
            try:
                async with self.read_only(timeout_ms, deferred=True) as conn:
                    return await work(conn)
            except StatementChangedError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    async def cancel(self, backends: set[int]) -> None:
        """Cancel what these backends are running (a role may always cancel its own)."""
        if backends:
            async with self.catalog() as conn:
                await conn.execute(
                    pin("SELECT pg_catalog.pg_cancel_backend(pid) FROM unnest($1::int[]) AS pid"),
                    sorted(backends),
                )

    async def ping(self) -> None:
        async with self.catalog() as conn:
            await conn.fetchval("SELECT 1")

    async def dispose(self) -> None:
        if self._releasing:
            await asyncio.gather(*self._releasing, return_exceptions=True)
        await self.engine.dispose()


# Connections checked out by `read_only(deferred=True)`, until _end: the transaction's statement
# timeout (ms) while the BEGIN is still to be sent, then _SENT once fetch_page has sent it
# (_end then rolls back whatever the transaction status says).
_deferred: weakref.WeakKeyDictionary[asyncpg.Connection, int] = weakref.WeakKeyDictionary()
_SENT = -1


def _utility_messages(sql: str) -> bytes:
    """Parse, Bind and Execute of one parameterless statement of ours on the unnamed statement
    and portal, without Sync: frontend protocol messages, to go ahead of a Bind/Execute/Sync
    (PostgreSQL runs them in order, as one extended-query series)."""
    text = sql.encode() + b"\0"
    parse = b"P" + struct.pack("!i", 4 + 1 + len(text) + 2) + b"\0" + text + b"\0\0"
    bind = b"B" + struct.pack("!i", 12) + b"\0\0" + b"\0\0\0\0\0\0"
    execute = b"E" + struct.pack("!i", 9) + b"\0" + b"\0\0\0\0"
    return parse + bind + execute


@functools.lru_cache(maxsize=64)
def _begin_messages(ms: int) -> bytes:
    return b"".join(_utility_messages(s.format(ms=ms)) for s in _BEGIN_STATEMENTS)


async def fetch_page(
    conn: asyncpg.Connection,
    stmt: asyncpg.prepared_stmt.PreparedStatement,
    args: list[Any],
    n: int,
) -> list[asyncpg.Record]:
    """Bind and Execute the prepared `stmt` with a row limit of `n` (unnamed portal, left
    unread beyond that until the transaction ends): one round trip.

    On a connection from `read_only(deferred=True)` the pending `BEGIN READ ONLY; SET LOCAL
    statement_timeout` goes first, in the same write: PostgreSQL runs it as part of the
    same extended-query series before the Bind, so the statement runs inside the explicit
    read-only transaction; asyncpg reads the extra ParseComplete/BindComplete/CommandComplete
    answers as it does for its own re-Parse ahead of a Bind. Only for a named, prepared
    statement (the BEGIN replaces the unnamed one) and no cancellation under way; otherwise
    the BEGIN takes its own round trip first. (`_checkout` never hands out a session inside
    a transaction, so the BEGIN always opens a new one.)
    """
    ms = _deferred.get(conn, _SENT)  # connections from read_only() have no BEGIN pending
    if ms != _SENT:
        _deferred[conn] = _SENT
        state = stmt._state
        if state.name and state.prepared and not conn._protocol._is_cancelling():
            return await _begin_and_fetch(conn, stmt, args, n, ms)
        # A simple Query drops the unnamed statement: have asyncpg Parse it again after.
        state.mark_unprepared()
        await conn.execute(_BEGIN.format(ms=ms))
    records: list[asyncpg.Record] = await stmt._PreparedStatement__bind_execute(args, n, None)
    return records


async def _begin_and_fetch(
    conn: asyncpg.Connection,
    stmt: asyncpg.prepared_stmt.PreparedStatement,
    args: list[Any],
    n: int,
    ms: int,
) -> list[asyncpg.Record]:
    """fetch_page's one-flight path: our BEGIN messages, then asyncpg's Bind/Execute/Sync."""
    sent = conn._protocol.queries_count  # counts the Bind/Execute/Sync asyncpg has written
    conn._transport.write(_begin_messages(ms))
    try:
        records: list[asyncpg.Record] = await stmt._PreparedStatement__bind_execute(args, n, None)
    except BaseException:
        if conn._protocol.queries_count == sent:
            # asyncpg refused before writing anything (a value that does not encode, say):
            # the BEGIN is on the wire with no Sync behind it, and PostgreSQL would take the
            # next message as part of its series. The session is dropped.
            conn.terminate()
        raise
    return records


class StatementChangedError(InvalidSqlError):
    """A cached statement's result no longer fits its tables; `Database.run` retries once."""


def _mapped(exc: Exception, ms: int) -> Exception:
    if isinstance(exc, PgMcpError):
        return exc
    return translate(exc, timeout_ms=ms) or exc


async def _driver_connection(sa_conn: AsyncConnection) -> asyncpg.Connection:
    raw = await sa_conn.get_raw_connection()
    driver = raw.driver_connection
    assert isinstance(driver, asyncpg.Connection)
    return driver


async def _end(sa_conn: AsyncConnection, conn: asyncpg.Connection, reset: str) -> None:
    """Roll back, reset the session and return it to the pool; one that cannot be reset
    (lost, or cancelled mid-query) is discarded."""
    try:
        if not conn.is_closed():
            # A cancelled statement's answer must be in before the transaction status is read
            # (the BEGIN sent with a statement is only seen as open once its Sync is answered).
            await conn._protocol._wait_for_cancellation()
            began = _deferred.pop(conn, None) == _SENT
            rollback = "ROLLBACK; " if began or conn.is_in_transaction() else ""
            await conn.execute(rollback + reset)
            await sa_conn.close()
            return
    except Exception:
        logger.warning("resetting a session failed; discarding the connection", exc_info=True)
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

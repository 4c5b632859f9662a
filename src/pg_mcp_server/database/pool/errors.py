"""Driver, pool and network failures as our PRD errors (`translate`): the one place an
asyncpg, SQLAlchemy or socket exception becomes a `PgMcpError`, for every read, the catalog
tools, EXPLAIN, custom SQL and the start-up audit alike.

Messages are written here, not copied from connection errors, so no DSN, host list or
password can leak; PostgreSQL's own messages about a statement are passed on.
"""

from __future__ import annotations

import re
import socket
from typing import Any

import asyncpg
import sqlalchemy.exc

from pg_mcp_server.errors import (
    ColumnNotFoundError,
    DatabaseConnectionError,
    InvalidSqlError,
    NotPopulatedError,
    ParameterError,
    PermissionDeniedError,
    PgMcpError,
    QueryTimeoutError,
    TableNotFoundError,
    WriteOperationDeniedError,
)

# Class 22 errors of arithmetic, never of a value's text: division by zero, overflow of a
# computed number, a bad argument to a function such as log or power.
_COMPUTED = frozenset({"22012", "22003", "2201E", "2201F", "22023"})


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


def pg_context(err: asyncpg.PostgresError) -> dict[str, Any]:
    ctx: dict[str, Any] = {"sqlstate": err.sqlstate}
    for key in ("detail", "hint", "position"):
        value = getattr(err, key, None)
        if value:
            ctx[key] = value
    return ctx


# PostgreSQL's message (in English, its default lc_messages; another language's falls back to
# INVALID_SQL with PostgreSQL's own hint) for reading a materialized view WITH NO DATA
_UNPOPULATED = re.compile(r'^materialized view ".*" has not been populated$')


def translate(exc: BaseException, *, timeout_ms: int | None = None) -> PgMcpError | None:
    """Map a driver, pool or network failure to its PRD error; None if it is none of those.

    Messages are written here, not copied from connection errors, so no DSN, host list or
    password can leak; PostgreSQL's own messages about a statement are passed on.
    """
    chain = _chain(exc)
    for err in chain:
        if isinstance(err, PgMcpError):  # already ours (database/pool/connect.py)
            return err
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
                suggestion="Check the user and password: PG_PASSWORD, when set, wins over a "
                "password in PG_DSN; without either, libpq's ~/.pgpass applies. The start-up "
                "log line 'cannot reach PostgreSQL' says which one was used.",
            )
        if isinstance(err, asyncpg.InvalidCatalogNameError):
            return DatabaseConnectionError(
                "The configured database does not exist.",
                suggestion="Check PG_DATABASE (or the database in the DSN).",
            )
        if (isinstance(err, asyncpg.InterfaceError) and isinstance(err, ValueError)) or (
            isinstance(err, asyncpg.DataError) and err.message is None
        ):
            # The driver's own: a bound value it could not encode, before anything was sent
            # (raised as a DataError without a server message, or as an InterfaceError).
            # A DataError PostgreSQL sent, with its message, is class 22, below.
            return ParameterError(
                f"A parameter value does not fit its type: {err}",
                suggestion="Check each value in `params` against its $n placeholder's type.",
            )
        if isinstance(err, asyncpg.DataError) and (
            err.position is not None or err.sqlstate in _COMPUTED
        ):
            # PostgreSQL's class 22 about the statement's text (a literal it points at) or its
            # arithmetic: not a parameter's fault.
            return InvalidSqlError(
                err.message,
                suggestion="A value could not be converted or computed: check the literals, "
                "casts and arithmetic in the query.",
                context=pg_context(err),
            )
        if isinstance(err, asyncpg.DataError):
            # Class 22 with no position in the text: a bound value PostgreSQL could not take
            # (one sent as text, such as an enum label), or a value a column held.
            return ParameterError(
                f"PostgreSQL could not take a value: {err.message}",
                suggestion="Check each value in `params` against its $n placeholder's type "
                "(an enum takes only its labels).",
                context=pg_context(err),
            )
        if isinstance(err, asyncpg.InternalClientError) and "resolve query result" in str(err):
            # The driver cannot describe a result of a pseudo-type it cannot decode (anyarray:
            # pg_stats.histogram_bounds, most_common_vals); nothing is wrong with the link.
            return InvalidSqlError(
                "The database driver cannot read a column of this query's result (a column of "
                "type anyarray, such as pg_stats.histogram_bounds, has no type it can decode).",
                suggestion="Cast that column to text, e.g. histogram_bounds::text.",
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
                context=pg_context(err),
            )
        if isinstance(err, asyncpg.InsufficientPrivilegeError):
            return PermissionDeniedError(err.message, context=pg_context(err))
        if isinstance(err, asyncpg.ReadOnlySQLTransactionError):
            return WriteOperationDeniedError(
                f"PostgreSQL refused a write in the read-only transaction: {err.message}",
                context=pg_context(err),
            )
        if isinstance(err, asyncpg.UndefinedColumnError):
            return ColumnNotFoundError(err.message, context=pg_context(err))
        if isinstance(err, asyncpg.UndefinedTableError):
            return TableNotFoundError(err.message, context=pg_context(err))
        if isinstance(err, asyncpg.ObjectNotInPrerequisiteStateError) and _UNPOPULATED.search(
            err.message or ""
        ):
            return NotPopulatedError(err.message, context=pg_context(err))
        if isinstance(err, asyncpg.PostgresError):
            return InvalidSqlError(err.message or str(err), context=pg_context(err))
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

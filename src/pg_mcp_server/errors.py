"""The typed error tree: one exception class per PRD section 7 error code.

Tools and the database layer raise these; `to_pg_error` is the one place anything raised
becomes one of them, for a tool's error result (tools/registry.py) and for the JSON-RPC error
of a read, a prompt or a completion (primitives/registry.py). Messages and context must never
carry a DSN or a password.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Iterable
from typing import Any, ClassVar

logger = logging.getLogger(__name__)


class PgMcpError(Exception):
    """Base class: a failure the caller can act on, with a PRD error code and a suggestion."""

    code: ClassVar[str] = "INTERNAL_ERROR"
    default_suggestion: ClassVar[str | None] = None

    def __init__(
        self,
        message: str,
        *,
        suggestion: str | None = None,
        context: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.suggestion = suggestion if suggestion is not None else self.default_suggestion
        self.context = context


class SchemaNotFoundError(PgMcpError):
    code = "SCHEMA_NOT_FOUND"
    default_suggestion = "Use list_schemas to see the available schemas."


class TableNotFoundError(PgMcpError):
    code = "TABLE_NOT_FOUND"
    default_suggestion = "Use list_tables to see the tables in the schema."


class ColumnNotFoundError(PgMcpError):
    code = "COLUMN_NOT_FOUND"
    default_suggestion = "Use describe_table to see the available columns."


class InvalidSqlError(PgMcpError):
    code = "INVALID_SQL"
    default_suggestion = "Review the query syntax."


class WriteOperationDeniedError(PgMcpError):
    code = "WRITE_OPERATION_DENIED"
    default_suggestion = (
        "This server only runs read-only queries: a single SELECT (WITH, VALUES and TABLE "
        "are fine) without data-modifying CTEs, SELECT INTO, row locks or side-effect functions."
    )


class QueryTimeoutError(PgMcpError):
    code = "QUERY_TIMEOUT"
    default_suggestion = "Simplify the query, filter on indexed columns, or add a LIMIT."


class DatabaseConnectionError(PgMcpError):
    code = "CONNECTION_ERROR"
    default_suggestion = (
        "Check that the database is reachable and the connection settings are right; "
        "the server keeps running and will reconnect on the next call."
    )


class ConnectionLostError(DatabaseConnectionError):
    """A pooled connection turned out dead during a call; `Database.run` runs the call again
    once, on a fresh connection (a dead one never goes back to the pool)."""


class PermissionDeniedError(PgMcpError):
    code = "PERMISSION_DENIED"
    default_suggestion = "The database role lacks a privilege; contact the database administrator."


class ParameterError(PgMcpError):
    code = "PARAMETER_ERROR"
    default_suggestion = "Review the parameter constraints in the tool's input schema."


class PathNotFoundError(PgMcpError):
    code = "PATH_NOT_FOUND"
    default_suggestion = "The tables may not be related through foreign keys."


class NotPopulatedError(PgMcpError):
    """A materialized view created WITH NO DATA (or never refreshed): reading it fails, and
    filling it takes REFRESH MATERIALIZED VIEW, a write no caller of ours can make."""

    code = "NOT_POPULATED"
    default_suggestion = (
        "The materialized view holds no data until its owner runs REFRESH MATERIALIZED VIEW. "
        "Query the tables it is defined on instead: describe_table shows its definition."
    )


class ResultExpiredError(PgMcpError):
    """A paged result that is no longer held: expired, evicted, held by another replica, or
    another caller's (the same answer in every case, so nothing tells that it exists)."""

    code = "RESULT_EXPIRED"
    default_suggestion = "Run the query again to get a new result and cursor."


class ExtensionMissingError(PgMcpError):
    """A tool needs an extension this database does not have installed, or a library the
    server did not preload; the suggestion names the statements and settings that fix it."""

    code = "EXTENSION_MISSING"
    default_suggestion = "Ask the database administrator to install the extension."


class InternalError(PgMcpError):
    """An unexpected failure; its message is generic so nothing internal leaks."""

    code = "INTERNAL_ERROR"
    default_suggestion = "This is a server bug; the details are in the server's log."


def from_detail(detail: dict[str, Any]) -> PgMcpError:
    """The error a structured error object (`{"code", "message", "suggestion", "context"}`,
    as a tool answers it) describes, of the class of its code."""
    classes: list[type[PgMcpError]] = [PgMcpError]
    for cls in classes:
        classes.extend(cls.__subclasses__())
    cls = next((c for c in classes if c.code == detail.get("code")), InternalError)
    return cls(
        str(detail.get("message") or "Request failed"),
        suggestion=detail.get("suggestion"),
        context=detail.get("context"),
    )


def to_pg_error(exc: Exception, unexpected: str) -> PgMcpError:
    """What `exc` means for the client: itself if it is ours, else INTERNAL_ERROR with the
    generic message `unexpected` (the traceback goes to the log, never to the client)."""
    if isinstance(exc, PgMcpError):
        return exc
    logger.error("%s", unexpected, exc_info=exc)
    return InternalError(unexpected)


def closest(name: str, candidates: Iterable[str], limit: int = 3) -> list[str]:
    """Names close to `name`: case-insensitive equals first, then difflib's nearest."""
    pool = list(candidates)
    folded = [c for c in pool if c.casefold() == name.casefold() and c != name]
    lowered = {c.casefold(): c for c in pool}
    near = difflib.get_close_matches(name.casefold(), list(lowered), n=limit, cutoff=0.6)
    prefixed = [c for c in pool if c.casefold().startswith(name.casefold()) and c != name]
    out: list[str] = []
    for c in [*folded, *(lowered[n] for n in near), *sorted(prefixed)]:
        if c not in out:
            out.append(c)
    return out[:limit]


def nearest_first(name: str, candidates: Iterable[str]) -> list[str]:
    """All of `candidates`, the most similar to `name` first (ties keep their order)."""
    folded = name.casefold()
    return sorted(
        candidates,
        key=lambda c: -difflib.SequenceMatcher(None, folded, c.casefold()).ratio(),
    )


def did_you_mean(similar: list[str], then: str) -> str:
    if not similar:
        return then
    names = " or ".join(f"'{s}'" for s in similar[:3])
    return f"Did you mean {names}? {then}"

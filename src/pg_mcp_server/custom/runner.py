"""How custom definitions run against the database, and how they are checked there at start.

The operator's SQL and code are trusted (their file), so they do not go through the agent's
guard; they always run in a transaction of their own on a pooled connection: `BEGIN READ ONLY`
with the tool's statement timeout (never above the server's), rolled back, unless the
definition asks for writes AND the operator allows them (`MCP_ALLOW_WRITE_TOOLS`): then
`BEGIN READ WRITE` and COMMIT. Arguments are always bound as parameters, never spliced in.
Every transaction runs under `search_path = pg_catalog, pg_temp` (set in the BEGIN's own
message: no round trip more), the path the statements were qualified for at the check
(custom/resolve.py), on which neither they nor the driver's own type lookups can reach a
planted object; PL code gets its own fixed path (resolve.PL_PATH).

A read-only pl-func tool's function is created once per pooled session, the first time the
tool runs there, in a short read-write transaction of its own that commits; every call is
then a read-only transaction that calls it, so a call assigns no transaction ID and fires
no DDL event trigger. A write tool, and every tool behind a transaction-mode pooler (where
no session state lasts past a transaction), creates it in the call's own transaction.

Engine APIs relied on: `Database.session()` (a pooled session outside any transaction,
rolled back and reset when released), `Database.timeout_ms()`, `params.bind()`,
`values.type_name()`; rows are read, made JSON (`values.from_driver`) and cut to the budget
by the server's `Reader` (`Reader.driven`), and answered in execute_query's shape
(`output.answer`).
"""

from __future__ import annotations

import json
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import asyncpg

from pg_mcp_server.custom import plcode
from pg_mcp_server.custom.resolve import SET_PATH, SET_RESTRICTED
from pg_mcp_server.database.catalog import MAX_VALUES, Names
from pg_mcp_server.database.pool import Database, translate
from pg_mcp_server.database.rows import answer, bind, from_driver, type_name
from pg_mcp_server.errors import (
    ConnectionLostError,
    DatabaseConnectionError,
    InvalidSqlError,
    ParameterError,
    PgMcpError,
    QueryTimeoutError,
    WriteOperationDeniedError,
)

if TYPE_CHECKING:  # (the guard's modules load on first use, see app.py)
    from pg_mcp_server.database.rows import Reader

_COMPLETION_SCAN = 1000  # rows read from a completion query that does not filter by $1


@dataclass(frozen=True)
class Column:
    name: str
    type: Any  # an asyncpg Type

    @property
    def data_type(self) -> str:
        return type_name(self.type)


@dataclass
class Rows:
    columns: list[Column]
    rows: list[dict[str, Any]]
    has_more: bool = False
    notes: list[str] = field(default_factory=list)
    status: str | None = None  # a write's command tag ("UPDATE 3")

    def structured(self) -> dict[str, Any]:
        # arrays in the order of `columns`, as execute_query's
        rows = [list(row.values()) for row in self.rows]
        return answer(self.columns, rows, self.has_more, self.notes, status=self.status or None)


@asynccontextmanager
async def transaction(
    db: Database,
    timeout_ms: int | None,
    *,
    write: bool,
    refused: str,
    creates: bool = False,
    before: Callable[[asyncpg.Connection], Awaitable[None]] | None = None,
    left_out: Sequence[str] = (),
) -> AsyncIterator[asyncpg.Connection]:
    """A connection inside a transaction of our own: read-only and rolled back, or (`write`)
    read-write and committed when the block succeeds. `creates`: read-write, to create a
    temporary function, yet rolled back (see create_function). `before(conn)` runs on the
    session before the transaction begins. `refused`: the suggestion that goes with a write
    PostgreSQL refused in a read-only transaction. `left_out`: the schemas the check left off
    the path (check.Checked.left_out), named when something is not found."""
    ms = db.timeout_ms(timeout_ms)
    mode = "READ WRITE" if write or creates else "READ ONLY"
    # The caller's role and settings (identity/), set in this transaction of our own.
    assumed = db.assumed()
    try:
        async with db.session(as_caller=False) as conn:
            if before is not None:
                await before(conn)
            await conn.execute(
                f"BEGIN {mode}; SET LOCAL statement_timeout = {int(ms)}; {SET_RESTRICTED}"
            )
            await db.assume(conn, assumed)
            try:
                yield conn
                if write:
                    await conn.execute("COMMIT")
            except asyncpg.PostgresError as exc:
                said = _said(exc, ms, refused, left_out)
                if said is None:
                    raise  # Database.session maps it (translate)
                raise said from None
    except ConnectionLostError as exc:
        if write:  # a write is never run twice: it may have committed before the loss
            raise DatabaseConnectionError(exc.message) from None
        raise


_LEFT_OUT_SUGGESTION = (
    "Name objects of that schema with it (public.t) in the definition and in the bodies of "
    "the functions it calls, or give those functions their own SET search_path; or revoke "
    "CREATE on that schema from the roles you do not trust (REVOKE CREATE ON SCHEMA public "
    "FROM PUBLIC)."
)
_UNDEFINED = (
    asyncpg.UndefinedTableError,
    asyncpg.UndefinedFunctionError,
    asyncpg.UndefinedObjectError,
)


def _said(
    exc: asyncpg.PostgresError, ms: int, refused: str, left_out: Sequence[str]
) -> PgMcpError | None:
    """A definition's failure in the words its operator needs, where they say more than
    `translate`'s (pool/errors.py: where every driver error gets its code, this one's too):
    its own timeout, who may let it write, a COMMIT in its code, a schema its path leaves
    off. None: `translate`'s error as it is."""
    mapped = translate(exc, timeout_ms=ms)
    if isinstance(mapped, QueryTimeoutError):
        return QueryTimeoutError(
            f"The definition's statement was cancelled after {ms} ms (its timeout).",
            context={"timeout_ms": ms},
        )
    if isinstance(mapped, WriteOperationDeniedError):
        return WriteOperationDeniedError(mapped.message, suggestion=refused)
    if isinstance(exc, asyncpg.InvalidTransactionTerminationError):
        return InvalidSqlError(
            f"The code tried to end the transaction: {exc.message}",
            suggestion="Custom code runs inside one transaction that the server ends; "
            "remove COMMIT and ROLLBACK from it.",
        )
    if isinstance(exc, _UNDEFINED) and left_out:
        # INVALID_SQL even for a table: the definition's path is at fault, which the
        # agent's list_tables cannot mend.
        return InvalidSqlError(
            f"{exc.message} (schema {', '.join(left_out)} is not on the path custom SQL and "
            "code run on: roles that are not trusted may create objects there, and one "
            "planted with a closer match would be picked)",
            suggestion=_LEFT_OUT_SUGGESTION,
            context={"left_off_path": list(left_out)},
        )
    return None


def _bound(
    stmt: asyncpg.prepared_stmt.PreparedStatement, values: Sequence[Any], names: Sequence[str]
) -> list[Any]:
    """`values` converted to the statement's parameter types; the statement may use fewer
    parameters than there are values (the trailing ones are not bound)."""
    types = stmt.get_parameters()
    if len(types) > len(values):
        raise ParameterError(
            f"The definition's SQL uses ${len(types)} but only {len(values)} value(s) are bound "
            f"({', '.join(names) or 'none'}).",
            suggestion="The definition needs as many arguments as its highest $n.",
        )
    try:
        return bind(list(values[: len(types)]), types)
    except ParameterError as exc:
        n = int(str((exc.context or {}).get("parameter", "$0"))[1:] or 0)
        name = names[n - 1] if 0 < n <= len(names) else "?"
        raise ParameterError(
            f"Argument '{name}' (bound to ${n}): {exc.message}",
            suggestion=f"Pass '{name}' as the input schema describes it.",
            context=exc.context,
        ) from None


async def fetch_rows(
    reader: Reader,
    conn: asyncpg.Connection,
    sql: str,
    values: Sequence[Any],
    names: Sequence[str],
    *,
    status: bool = False,
    path: str | None = None,
) -> Rows:
    """The rows of `sql`, cut to the reader's budget (MCP_MAX_ROWS, MCP_MAX_RESULT_BYTES),
    with has_more. `status`: run the whole statement (a write) and report its command tag.
    `path`: the search path it runs on once prepared (see _prepare).

    The reader's `driven` reads them, not its wrapper (`Reader.fetch`): that is built for the
    one SELECT the agent's guard let through, and keeps what it describes per SQL text with
    the redaction decided for the agent, whom a shape made for the operator's SQL must never
    serve; a definition's SQL may be a write with RETURNING, runs in a transaction of its own
    that is never run twice (a write may have committed), and has output schemas made at
    start from the driver's types (custom/build.py)."""
    stmt = await _prepare(conn, sql, path)
    args = _bound(stmt, values, names)
    columns = [Column(a.name, a.type) for a in stmt.get_attributes()]
    twice = duplicated([c.name for c in columns])
    if twice:  # (refused at start; here for definitions served unchecked)
        raise InvalidSqlError(
            f"The definition's result has more than one column named {twice}.",
            suggestion="Its operator names the columns apart (AS ...).",
        )
    got = await reader.driven(stmt, args, [c.name for c in columns], whole=status)
    return Rows(columns, got.rows, got.has_more, got.notes, got.status)


async def _prepare(
    conn: asyncpg.Connection, sql: str, path: str | None
) -> asyncpg.prepared_stmt.PreparedStatement:
    """`sql` prepared on the restricted path (the driver looks the result's unknown types up
    while preparing, with its own unqualified SQL), then, with `path`, that path set for
    running it: `sql` names everything qualified (custom/check.py), so only the functions
    it calls see the path, as they would for any caller."""
    stmt = await conn.prepare(sql)
    if path is not None:
        await conn.fetchval(SET_PATH, path)
    return stmt


def duplicated(names: Sequence[str]) -> str | None:
    """A name that appears more than once, if any."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return None


async def run_do(conn: asyncpg.Connection, block: str, args: dict[str, Any], path: str) -> Any:
    """A pl-do tool's DO `block` run with `args` on the PL `path`: its result (JSON when it
    is JSON text, else the text; None if unset)."""
    await conn.execute(
        "SELECT pg_catalog.set_config($1, $2, true), pg_catalog.set_config($3, '', true), "
        "pg_catalog.set_config('search_path', $4, true)",
        plcode.ARGS_SETTING,
        json.dumps(args),
        plcode.RESULT_SETTING,
        path,
    )
    await conn.execute(block)
    await conn.execute(SET_RESTRICTED)
    text = await conn.fetchval("SELECT pg_catalog.current_setting($1, true)", plcode.RESULT_SETTING)
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


async def create_function(conn: asyncpg.Connection, create: str, path: str, *, write: bool) -> None:
    """Create a pl-func tool's temporary function (`create`: its CREATE FUNCTION, whose body
    keeps the PL `path`), to be called (`plcode.call_function()`, through fetch_rows) in the
    same transaction, whose rollback drops it. A read-only tool's transaction turns read-only
    once the function exists (PostgreSQL allows that switch at any point, never the other
    way), so the code itself cannot write."""
    await conn.fetchval(SET_PATH, path)
    await conn.execute(create)
    await conn.execute(SET_RESTRICTED)
    if not write:
        await conn.execute("SET TRANSACTION READ ONLY")


class SessionFunctions:
    """A read-only pl-func tool's function, created once on each pooled session that runs it
    and kept there (a temporary function lasts as long as its session)."""

    def __init__(self, create: str, path: str) -> None:
        self.create = create
        self.path = path
        self._made: weakref.WeakSet[asyncpg.Connection] = weakref.WeakSet()

    async def ensure(self, conn: asyncpg.Connection) -> None:
        """On `conn`, outside any transaction: the function, created if it is not there."""
        if conn in self._made:
            return
        await conn.execute(f"BEGIN READ WRITE; {SET_RESTRICTED}")
        try:
            await conn.fetchval(SET_PATH, self.path)
            await conn.execute(self.create)
        except BaseException:
            await conn.execute("ROLLBACK")
            raise
        await conn.execute("COMMIT")
        self._made.add(conn)

    def lost(self, conn: asyncpg.Connection) -> None:
        """The session no longer has it (something discarded its temporary objects)."""
        self._made.discard(conn)


def tsv(rows: Rows) -> str:
    """Rows as tab-separated text with a header line (pgEdge's resource format), in
    PostgreSQL's COPY text conventions: backslash, tab, newline and carriage return escaped,
    NULL as \\N."""
    lines = ["\t".join(_cell(c.name) for c in rows.columns)]
    for row in rows.rows:
        lines.append("\t".join(_cell(v) for v in row.values()))
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    if value is None:
        return "\\N"
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = value
    elif isinstance(value, dict | list):
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    else:
        text = str(value)
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


async def complete(
    conn: asyncpg.Connection, sql: str, value: str, path: str | None = None
) -> Names:
    """The first MAX_VALUES values of a completion query: `$1` is what was typed so far (a
    query without $1 is filtered here, by prefix, ignoring case). `path`: see fetch_rows."""
    stmt = await _prepare(conn, sql, path)
    filtered = bool(stmt.get_parameters())
    cursor = await stmt.cursor(*bind([value], stmt.get_parameters()) if filtered else ())
    records = await cursor.fetch(MAX_VALUES + 1 if filtered else _COMPLETION_SCAN)
    found = [str(from_driver(r[0])) for r in records if r[0] is not None]
    if not filtered:
        found = [v for v in found if v.casefold().startswith(value.casefold())]
    has_more = len(found) > MAX_VALUES
    found = found[:MAX_VALUES]
    return Names(values=found, total=None if has_more else len(found), has_more=has_more)

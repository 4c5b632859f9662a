"""Connection pool and the ways a tool uses a connection (public asyncpg and SQLAlchemy APIs).

SQLAlchemy's async engine owns pooling (size, timeout); the work itself runs on the pooled
asyncpg connection, so statements use asyncpg's extended protocol (one prepared statement per
message). The engine is in AUTOCOMMIT mode so that SQLAlchemy starts no transaction of its own.

Connected directly (or through a session-mode pooler), every pooled session is read-only
(`default_transaction_read_only`) with the server's statement timeout from the moment it opens,
and is returned to exactly that state after each use (the login role and session authorization,
advisory locks, LISTEN, cursors, every setting; see _RESET) before the pool can hand it out.
A lone statement of our own therefore runs in an implicit read-only transaction. SQL a caller
wrote runs in an explicit `BEGIN READ ONLY; SET LOCAL statement_timeout` transaction
(`read_only(explicit=True)`), always rolled back, which the guard's check and its relation
locks share with the statement (see `Transaction`); the locks of a known plan go out in
BEGIN's message (`Prelude`).

Behind a transaction-mode pooler (PgBouncer, Supavisor) no session state sticks: a SET, a
prepared statement or the reset may land on another server connection, and another client may
have changed this one. There every use is an explicit `BEGIN READ ONLY` transaction, always
rolled back, statements are unnamed and parsed again each time, what a statement could leave
past ROLLBACK is cleared inside its transaction (_POOLED_END), and no session is reset or
cancelled by backend pid (PgBouncer shows a pid of its own). `PG_POOL_MODE` says which (`auto`:
the first connection compares the backend pid PostgreSQL reports with the one the connection
was given at start-up; a pooler in between makes them differ).

A caller with a grant (identity/: users over HTTP, `auth.stdio_user`) has every use of a
connection in an explicit `BEGIN READ ONLY` transaction that first runs, right after BEGIN,
`set_config('role', $1, true)` and its settings the same way (`assume`, bound parameters):
all LOCAL, so ROLLBACK (and _POOLED_END's ROLLBACK TO the start savepoint) ends them before
anyone else uses the session. Without an identity nothing of this runs.

Its size (~800 lines) is one object's lifecycle: checkout, the transaction, the caller's role,
the guard's locks and their waits, cancellation and the background reset, which share the
pool's state.
"""

from __future__ import annotations

import asyncio
import json
import logging
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TypeVar

import asyncpg
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from pg_mcp_server.config import DatabaseSettings
from pg_mcp_server.database.pool.connect import connect
from pg_mcp_server.database.pool.errors import translate
from pg_mcp_server.database.sql import statement
from pg_mcp_server.errors import (
    ConnectionLostError,
    DatabaseConnectionError,
    InvalidSqlError,
    PermissionDeniedError,
    PgMcpError,
    QueryTimeoutError,
)
from pg_mcp_server.identity import AuthSettings, Grant, Identity, current_identity

logger = logging.getLogger(__name__)
T = TypeVar("T")

# Our own constant text, never a caller's SQL, so the simple protocol's multi-statement
# message is fine here: one round trip each.
_SESSION = "SET default_transaction_read_only = on; SET statement_timeout = {ms}"
# The savepoint marks the transaction's first state, for _POOLED_END.
_BEGIN = "BEGIN READ ONLY; SET LOCAL statement_timeout = {ms}; SAVEPOINT pg_mcp_start"
# Before reuse, the session goes back to exactly the state it was set up in: the login role
# and session authorization (RESET ALL leaves both alone, so a statement that ran
# `set_config('role', ..., false)` would have every later call run as that role; DEFAULT is
# allowed for any role and resets the role too), no session advisory lock, LISTEN, cursor or
# sequence state, every setting reset, then set up again. A session where SQL-level PREPARE
# left a statement behind, or that holds a temporary object other than a custom pl-func
# tool's function, is refused (the guard never lets either through; this is the backstop) and
# so discarded. DEALLOCATE ALL, like DISCARD ALL, would also drop the driver's own prepared
# statements, which the statement cache relies on; DISCARD TEMP would drop the pl-func
# functions (`pg_temp.mcp_tool_*`, custom/plcode.py), which a session keeps so that a
# read-only call creates nothing (no XID per call).
_LEFT_BEHIND = """(
    EXISTS (SELECT FROM pg_catalog.pg_prepared_statements WHERE from_sql)
    OR EXISTS (SELECT FROM pg_catalog.pg_class
               WHERE relnamespace = pg_catalog.pg_my_temp_schema())
    OR EXISTS (SELECT FROM pg_catalog.pg_type
               WHERE typnamespace = pg_catalog.pg_my_temp_schema())
    OR EXISTS (SELECT FROM pg_catalog.pg_proc
               WHERE pronamespace = pg_catalog.pg_my_temp_schema()
                 AND NOT pg_catalog.starts_with(proname::pg_catalog.text, 'mcp_tool')))"""
# (Then _SESSION again, which names nothing to pin: see Database.__init__.)
_RESET = statement(
    "pool.engine.RESET",
    "SET SESSION AUTHORIZATION DEFAULT; "
    f"SELECT 1 / (NOT {_LEFT_BEHIND})::pg_catalog.int4, pg_catalog.pg_advisory_unlock_all(); "
    "CLOSE ALL; UNLISTEN *; DISCARD SEQUENCES; RESET ALL",
)
# Behind a transaction pooler the session is not ours to reset, and the next statement may
# reach another server connection: what a statement could leave past its transaction is
# cleared inside it, on the same server connection. ROLLBACK undoes settings (is_local false
# too), role, session authorization and LISTEN; not session advisory locks, nor statements
# prepared from SQL (seen on PostgreSQL 15 and 18). The savepoint makes this work after a
# failed statement too; a prepared statement left behind fails it, and a client that goes
# away in the middle of a transaction makes PgBouncer close that server connection.
_POOLED_END = statement(
    "pool.engine.POOLED_END",
    "ROLLBACK TO SAVEPOINT pg_mcp_start; "
    "SELECT 1 / (NOT EXISTS (SELECT FROM pg_catalog.pg_prepared_statements WHERE from_sql))"
    "::pg_catalog.int4, pg_catalog.pg_advisory_unlock_all(); ROLLBACK",
)
_DETECT = "SELECT pg_catalog.pg_backend_pid()"
# Of the roles users' grants name, those the login role cannot act as (no such role, or not
# a member): checked at start, so the operator hears of it before a caller does.
_UNUSABLE_ROLES = statement(
    "pool.engine.UNUSABLE_ROLES",
    """
SELECT k.name FROM pg_catalog.unnest($1::pg_catalog.text[]) AS k(name)
WHERE CASE WHEN EXISTS (SELECT FROM pg_catalog.pg_roles r WHERE r.rolname = k.name)
           THEN NOT pg_catalog.pg_has_role(session_user, k.name, 'MEMBER')
           ELSE true END
ORDER BY 1
""",
)
# A caller's role and settings for its grant (identity/), right after BEGIN: each set with
# is_local, so the transaction's end (ROLLBACK, and ROLLBACK TO the start savepoint behind a
# transaction pooler) undoes them. Names and values are parameters, never SQL text; the role
# goes to set_config('role', ...), which is SET LOCAL ROLE (PostgreSQL checks membership).
_ASSUME = statement(
    "pool.engine.ASSUME",
    """
SELECT pg_catalog.set_config(($1::pg_catalog.text[])[s.i], ($2::pg_catalog.text[])[s.i], true)
FROM pg_catalog.generate_subscripts($1::pg_catalog.text[], 1) AS s(i)
""",
)
_CANCEL = statement(
    "pool.engine.CANCEL", "SELECT pg_catalog.pg_cancel_backend(pid) FROM unnest($1::int[]) AS pid"
)
# The start-up audit's privileged part (audit.py), again on every new connection unless the
# role is allowed: a role made superuser after the start, or one the start could not audit
# (the database was down), is still refused.
_PRIVILEGED = statement(
    "pool.engine.PRIVILEGED",
    """
SELECT current_user AS role, r.rolsuper AS superuser,
       ARRAY(SELECT p FROM unnest($1::text[]) AS p
             WHERE pg_has_role(current_user, p, 'MEMBER')) AS file_roles
FROM pg_catalog.pg_roles r WHERE r.rolname = current_user
""",
)

# Types the driver reads only in their text form, which it cannot do inside a composite value
# (a whole-row reference to a table with a tsvector column, say), so it cannot even describe
# a statement returning one. Values never reach the driver in our statements (PostgreSQL makes
# their JSON, see rewrite.py), so for describing such a statement these types, and every type
# from an extension, are read as raw bytes on that connection, which is then discarded rather
# than pooled (our own catalog reads must keep the driver's usual forms).
_TEXT_ONLY = [
    "interval",  # text on our connections, see _setup
    # The pg_catalog types asyncpg 0.32 cannot describe inside a composite (found by trying
    # each base type as a composite's only field).
    *("aclitem", "gtsvector", "macaddr", "macaddr8", "money", "refcursor"),
    *("tsquery", "tsvector", "pg_dependencies", "pg_ndistinct", "pg_node_tree"),
    *("regclass", "regcollation", "regconfig", "regdictionary", "regnamespace", "regoper"),
    *("regoperator", "regproc", "regprocedure", "regrole", "regtype"),
]
_EXTENSION_TYPES = statement(
    "pool.engine.EXTENSION_TYPES",
    """
SELECT t.typname, n.nspname FROM pg_catalog.pg_type t
JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
WHERE t.typtype = 'b' AND t.typcategory <> 'A'
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
""",
)

STATEMENT_CACHE = 100  # prepared statements kept per connection (asyncpg's default too)

# The backends working for the current request (set by the HTTP gateway per request and
# inherited by the tasks that serve it), so a request whose client went away can have its
# queries cancelled.
request_backends: ContextVar[set[int] | None] = ContextVar("request_backends", default=None)

# The role the statements of the current block run as (a caller's grant, SET LOCAL ROLE),
# None for the login role: the guard keeps its catalog facts per role (guard/gate.py), since
# the search path and the schemas a role may use are the role's own.
acting_role: ContextVar[str | None] = ContextVar("acting_role", default=None)


@dataclass(frozen=True)
class Assumed:
    """What one caller's statements run with in this database: `role` (None: the login role)
    and the custom settings, as the parameters of _ASSUME."""

    role: str | None
    names: tuple[str, ...]
    values: tuple[str, ...]


@dataclass(frozen=True)
class Prelude:
    """Our own statements sent with a transaction's BEGIN, in the same message (the guard's
    relation locks, see guard/state.py): what they lock (oid -> the guard's key), and by name
    (oid -> qualified name) for a lock-wait error."""

    sql: str
    locked: dict[int, str]
    named: dict[int, str]
    # Called when a relation it names is gone (dropped, renamed, its schema renamed or no
    # longer usable): the guard reads its facts again, and the call runs once more
    # (StatementChangedError).
    gone: Callable[[], None] = lambda: None
    # The `SET LOCAL search_path` among `sql`, if any: the statement's path (see
    # closure.run_path), recorded in the Transaction.
    search_path: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(set(self.named.values())))


# What a lock statement of the guard's (Prelude) raises when a relation it names is gone or
# no longer what the facts say: the facts are read again and the call runs once more.
LOCK_FAILURES = (
    asyncpg.UndefinedTableError,
    asyncpg.InvalidSchemaNameError,
    asyncpg.InsufficientPrivilegeError,
    asyncpg.WrongObjectTypeError,
)


@dataclass(eq=False)
class Transaction:
    """The explicit read-only transaction one use of a connection runs in: its timeout, and
    the relations the guard has locked in it so far (oid -> what the lock named), which its
    ROLLBACK releases."""

    conn: asyncpg.Connection
    timeout_ms: int
    locked: dict[int, str] = field(default_factory=dict)
    # The `SET LOCAL search_path` the guard sent in it, None while the session's holds.
    search_path: str | None = None


# The transaction of the `read_only(explicit=True)` block the current task is in.
_transaction: ContextVar[Transaction | None] = ContextVar("transaction", default=None)


def transaction_of(conn: asyncpg.Connection) -> Transaction | None:
    """The explicit transaction `conn` is in for the current block, if the engine began it."""
    found = _transaction.get()
    return found if found is not None and found.conn is conn else None


# Which of some relations, or of those their views read (which locking a view, or reading
# its definition, locks too), another session holds in the one mode that conflicts with
# ACCESS SHARE, by name (always quoted, as the guard writes names).
_HOLDERS = statement(
    "pool.engine.HOLDERS",
    """
WITH RECURSIVE rels(oid) AS (
    SELECT k.oid FROM pg_catalog.unnest($1::pg_catalog.oid[]) AS k(oid)
    UNION
    SELECT d.refobjid FROM rels
    JOIN pg_catalog.pg_rewrite r ON r.ev_class = rels.oid
    JOIN pg_catalog.pg_depend d ON d.objid = r.oid
     AND d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass
     AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass)
SELECT DISTINCT '"' || pg_catalog.replace(n.nspname::pg_catalog.text, '"', '""') || '"."'
       || pg_catalog.replace(c.relname::pg_catalog.text, '"', '""') || '"' AS name
FROM pg_catalog.pg_locks l
JOIN pg_catalog.pg_class c ON c.oid = l.relation
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE l.locktype = 'relation' AND l.granted AND l.mode = 'AccessExclusiveLock'
  AND l.relation IN (SELECT rels.oid FROM rels)
  AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d
                    WHERE d.datname = pg_catalog.current_database())
ORDER BY 1
""",
)


async def lock_wait_error(
    conn: asyncpg.Connection, oids: Collection[int], ms: int, names: tuple[str, ...] = ()
) -> QueryTimeoutError | None:
    """The error for a statement the call's timeout ended while it may have waited for a lock
    on one of `oids`: which ones another session holds (a schema change, VACUUM FULL, an
    explicit LOCK) is asked of pg_locks once the transaction is rolled back (its own wait
    gone). None when none is held and no `names` were given (the statement was just slow)."""
    try:
        await conn.execute("ROLLBACK")
        held = tuple(r["name"] for r in await conn.fetch(_HOLDERS, sorted(oids)))
    except (asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        logger.debug("could not tell which lock a call waited for (%s)", _reason(exc))
        held = ()
    names = held or names
    if not names:
        return None
    what = names[0] if len(names) == 1 else "one of " + ", ".join(names[:10])
    return QueryTimeoutError(
        f"Waited {ms} ms for a lock on {what}: another session holds a conflicting lock on it "
        "(a schema change, VACUUM FULL or an explicit LOCK in an open transaction).",
        suggestion="Try again once that session has committed or rolled back; an "
        "administrator can find it in pg_locks / pg_stat_activity.",
        context={"timeout_ms": ms, "waiting_for": "lock", "relations": list(names)},
    )


async def send_locks(
    conn: asyncpg.Connection, sql: str, prelude: Prelude, timeout_ms: int | None
) -> None:
    """Send `sql`, which takes the prelude's locks: a wait past the call's timeout is an
    error naming what it waited for; a relation gone, or no longer what the facts say (its
    kind, or a privilege revoked through a role membership), loses the transaction, so the
    call runs once more (Database.run) after the facts are read again."""
    try:
        await conn.execute(sql)
    except asyncpg.QueryCanceledError:
        if timeout_ms is None:
            raise
        error = await lock_wait_error(conn, prelude.locked, timeout_ms, prelude.names)
        assert error is not None
        raise error from None
    except LOCK_FAILURES:
        prelude.gone()
        raise StatementChangedError(
            "A relation the query reads was renamed or dropped since it was checked"
        ) from None


class StatementChangedError(InvalidSqlError):
    """A prepared statement no longer fits its tables (a column added, dropped or retyped
    since): `Database.run` runs the work once more, after the statement is prepared anew."""


class Database:
    """The pool plus the ways to use it: `run(work)` (with its retries), or the blocks
    `read_only()` (SQL a caller wrote) and `session()` (our own constant statements)."""

    def __init__(
        self,
        settings: DatabaseSettings,
        *,
        name: str = "default",
        allow_privileged: bool = True,
        auth: AuthSettings | None = None,
    ) -> None:
        """`allow_privileged=False` (MCP_ALLOW_PRIVILEGED_ROLE unset): a connection whose role
        is a superuser or a member of a file or program role is refused (see audit.py).
        `name`: this database's name in the users' grants (identity/); `auth`: which
        settings carry the caller's name and claims (the defaults when None)."""
        self.settings = settings
        self.name = name  # the configured database's name (configfile.py)
        self.auth = auth if auth is not None else AuthSettings()
        # Users' roles found not privileged (see assume), checked once each.
        self._vetted: set[str] = set()
        self.allow_privileged = allow_privileged
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
        self._reset = f"{_RESET}; {self._session}"
        self._pooled_end = _POOLED_END
        # True behind a transaction-mode pooler; None until the first connection tells (auto).
        self.pooled: bool | None = {"session": False, "transaction": True}.get(settings.pool_mode)
        self._detecting = asyncio.Lock()
        # Connections that served a call before: one of those found dead may be retried.
        self._used: weakref.WeakSet[asyncpg.Connection] = weakref.WeakSet()
        self._statements: weakref.WeakKeyDictionary[
            asyncpg.Connection, OrderedDict[str, asyncpg.prepared_stmt.PreparedStatement]
        ] = weakref.WeakKeyDictionary()
        self._raw_types: weakref.WeakSet[asyncpg.Connection] = weakref.WeakSet()

    # --- connections --------------------------------------------------------------------

    async def _open(self, pooled: bool) -> asyncpg.Connection:
        return await connect(
            self.settings,
            # Behind a transaction pooler, named statements would outlive our transaction
            # on a server connection others use: asyncpg then parses every statement unnamed.
            statement_cache_size=0 if pooled else STATEMENT_CACHE,
        )

    async def _connect(self) -> asyncpg.Connection:
        if self.pooled is None:
            async with self._detecting:
                if self.pooled is None:
                    return await self._detect()
        conn = await self._open(self.pooled)
        try:
            await self._setup(conn)
        except BaseException:
            conn.terminate()
            raise
        return conn

    async def _detect(self) -> asyncpg.Connection:
        """PG_POOL_MODE=auto: a pooler in between hands out a backend pid of its own at
        start-up, which differs from the one PostgreSQL reports."""
        conn = await self._open(False)
        try:
            # Unnamed and inside a transaction, so that a transaction pooler keeps the Parse,
            # Bind and Execute on one server connection and no statement is left behind.
            async with conn.transaction(readonly=True):
                probe = await conn.prepare(_DETECT, name="")
                pid = await probe.fetchval()
            self.pooled = pid != conn.get_server_pid()
            if not self.pooled:
                await self._setup(conn)
                return conn
        except BaseException:
            conn.terminate()
            raise
        await conn.close()
        logger.info(
            "connected through a transaction pooler (PgBouncer or similar): every statement "
            "runs in a read-only transaction of its own (set PG_POOL_MODE to skip this check)"
        )
        return await self._connect()

    async def _setup(self, conn: asyncpg.Connection) -> None:
        if not self.allow_privileged:
            from pg_mcp_server.database.pool.audit import FILE_ROLES, privileges, refusal

            row = await conn.fetchrow(_PRIVILEGED, FILE_ROLES)
            assert row is not None
            found = privileges(row["role"], row["superuser"], row["file_roles"])
            if found:
                logger.error("%s", refusal(found).replace("refusing to start", "refused"))
                raise PermissionDeniedError(
                    f"The server's database role is privileged ({'; '.join(found)}): "
                    "refused, one statement past the guard could run programs on the "
                    "database host.",
                    suggestion="Ask the operator to connect the server as a role that can "
                    "only SELECT (or to set MCP_ALLOW_PRIVILEGED_ROLE=true).",
                )
        # Interval parameters are PostgreSQL text ("1 mon 2 days"): asyncpg's timedelta would
        # fold months into 30 days.
        await conn.set_type_codec(
            "interval", schema="pg_catalog", encoder=str, decoder=str, format="text"
        )
        if not self.pooled:
            await conn.execute(self._session)

    async def describe(
        self, conn: asyncpg.Connection, sql: str
    ) -> asyncpg.prepared_stmt.PreparedStatement:
        """`sql` prepared unnamed, for its parameter and result types (see _TEXT_ONLY)."""
        try:
            return await conn.prepare(sql, name="")
        except asyncpg.UnsupportedClientFeatureError:
            if conn in self._raw_types:
                raise
        self._raw_types.add(conn)
        rows = await conn.fetch(_EXTENSION_TYPES)
        for name, schema in [(n, "pg_catalog") for n in _TEXT_ONLY] + [tuple(r) for r in rows]:
            await conn.set_builtin_type_codec(name, schema=schema, codec_name="bytea")
        return await conn.prepare(sql, name="")

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
                raw = await sa_conn.get_raw_connection()
                conn = raw.driver_connection
            except Exception:
                await _discard(sa_conn)
                raise
            assert isinstance(conn, asyncpg.Connection)
            # A session still inside a transaction must never be handed out (_end rolls back
            # before reuse; this is the backstop): it would hold its locks and stale now().
            usable = not conn.is_closed() and not conn.is_in_transaction()
            if usable and (not _probing.get() or await _answers(conn)):
                return sa_conn, conn
            logger.info(
                "discarding a pooled connection %s",
                "the server closed" if conn.is_closed() else "found inside a transaction",
            )
            await _discard(sa_conn)
        raise DatabaseConnectionError("The database connection was lost or refused.")

    # --- prepared statements ------------------------------------------------------------

    async def prepare(
        self, conn: asyncpg.Connection, sql: str
    ) -> tuple[asyncpg.prepared_stmt.PreparedStatement, bool]:
        """`sql` prepared on `conn`, and whether it was prepared just now; kept for its next use
        (the last STATEMENT_CACHE of them): a repeated statement costs no Parse. Behind a
        transaction pooler, parsed anew every time."""
        if self.pooled:
            return await conn.prepare(sql), True
        cache = self._statements.setdefault(conn, OrderedDict())
        stmt = cache.get(sql)
        if stmt is not None:
            cache.move_to_end(sql)
            return stmt, False
        stmt = cache[sql] = await conn.prepare(sql)
        if len(cache) > STATEMENT_CACHE:
            cache.popitem(last=False)  # asyncpg closes it once nothing refers to it
        return stmt, True

    def forget(self, sql: str) -> None:
        """Drop a statement that no longer fits its tables, on every connection (see
        StatementChangedError)."""
        for cache in self._statements.values():
            cache.pop(sql, None)

    # --- using a connection -------------------------------------------------------------

    @asynccontextmanager
    async def read_only(
        self,
        timeout_ms: int | None = None,
        *,
        explicit: bool = False,
        prelude: Prelude | None = None,
    ) -> AsyncIterator[asyncpg.Connection]:
        """A pooled connection for SQL a caller wrote: each statement read-only under the
        statement timeout (the caller's, when lower), nothing ever committed. `explicit`: in
        one `BEGIN READ ONLY` transaction, always rolled back (what the guard checks and
        what it locks hold until the statement ends; a NOTIFY is never delivered), with
        `prelude` sent in BEGIN's message."""
        ms = self.timeout_ms(timeout_ms)
        begin = explicit or ms < self.settings.statement_timeout
        assumed = self.assumed()
        if assumed is not None and assumed.role is not None:
            prelude = None  # (see run)
        async with self._use(ms, begin, prelude, assumed) as conn:
            yield conn

    @asynccontextmanager
    async def session(self, *, as_caller: bool = True) -> AsyncIterator[asyncpg.Connection]:
        """A pooled read-only session for our own constant statements (catalog reads with
        bound parameters), each its own read-only transaction under the server's timeout.
        Never for SQL a caller wrote: use `read_only()`. For a caller with a grant (identity/)
        the block is one `BEGIN READ ONLY` transaction as its role, with its settings, like
        read_only(): what the catalog shows (privileges, pg_stats under row-level security)
        is what that role may see. `as_caller=False`: as the login role, for what acts on the
        server's own sessions (cancelling a request's backends, /health) or begins its own
        transaction and assumes the caller itself (custom/runner.py, `assume`)."""
        assumed = self.assumed() if as_caller else None
        async with self._use(self.settings.statement_timeout, False, None, assumed) as conn:
            yield conn

    def assumed(self) -> Assumed | None:
        """What the current caller (`current_identity`) runs as in this database; None for no
        identity (the login role, today's single-user case, at no cost). A caller without a
        grant for this database is refused."""
        identity = current_identity.get()
        if identity is None:
            return None
        grant = identity.user.grant(self.name)
        if grant is None:
            raise PermissionDeniedError(
                f"User {identity.name!r} may not use database {self.name!r}.",
                suggestion="Use a database your user entry lists under `databases:`.",
                context={"database": self.name},
            )
        return self._assumed(identity, grant)

    def _assumed(self, identity: Identity, grant: Grant) -> Assumed:
        pairs = [("role", grant.role)] if grant.role is not None else []
        pairs += list(grant.settings.items())
        if self.auth.user_setting is not None:
            pairs.append((self.auth.user_setting, identity.name))
        if self.auth.claims_setting is not None:
            pairs.append((self.auth.claims_setting, json.dumps(identity.claims, default=str)))
        return Assumed(grant.role, tuple(n for n, _ in pairs), tuple(v for _, v in pairs))

    async def assume(self, conn: asyncpg.Connection, assumed: Assumed | None) -> None:
        """Run as `assumed` for the rest of the transaction `conn` is in (its role and
        settings, all LOCAL). A role the login role may not SET ROLE to is a clear refusal."""
        if assumed is None or not assumed.names:
            return
        try:
            await conn.fetch(_ASSUME, list(assumed.names), list(assumed.values))
        except asyncpg.InsufficientPrivilegeError:
            raise self._not_member(assumed.role) from None
        except asyncpg.InvalidParameterValueError as exc:
            if assumed.role is not None and "role" in (exc.message or ""):
                raise self._not_member(assumed.role) from None
            raise
        role = assumed.role
        if role is not None and not self.allow_privileged and role not in self._vetted:
            # The login role's own audit (_setup) does not see what a role it may SET ROLE
            # to is: a superuser role is not inherited through membership. Once per role.
            from pg_mcp_server.database.pool.audit import FILE_ROLES, privileges

            row = await conn.fetchrow(_PRIVILEGED, FILE_ROLES)  # current_user: the role
            assert row is not None
            found = privileges(row["role"], row["superuser"], row["file_roles"])
            if found:
                logger.error("refused a user's role: %s", "; ".join(found))
                raise PermissionDeniedError(
                    f"The role {role!r} that calls run as here is privileged "
                    f"({'; '.join(found)}): refused, one statement past the guard could run "
                    "programs on the database host.",
                    suggestion="Ask the operator to give the user a role that can only "
                    "SELECT (or to set MCP_ALLOW_PRIVILEGED_ROLE=true).",
                    context={"database": self.name, "role": role},
                )
            self._vetted.add(role)

    async def unusable_roles(self, roles: Collection[str]) -> list[str]:
        """Which of `roles` the login role cannot SET ROLE to (see _UNUSABLE_ROLES)."""
        async with self.session(as_caller=False) as conn:
            return [r["name"] for r in await conn.fetch(_UNUSABLE_ROLES, sorted(set(roles)))]

    def _not_member(self, role: str | None) -> PermissionDeniedError:
        return PermissionDeniedError(
            f"The server's login role cannot act as role {role!r} in database {self.name!r} "
            "(it does not exist, or the login role is not a member of it with SET).",
            suggestion="Ask the operator to GRANT that role to the server's login role, or "
            "to fix the user's `databases:` entry.",
            context={"database": self.name, "role": role},
        )

    async def run(
        self,
        work: Callable[[asyncpg.Connection], Awaitable[T]],
        timeout_ms: int | None = None,
        *,
        own: bool = False,
        explicit: bool = False,
        prelude: Callable[[], Prelude | None] | None = None,
    ) -> T:
        """`work(conn)` in `read_only(timeout_ms, explicit=..., prelude=prelude())` (`own`: in
        `session()`), run once more on
        another connection when the first turned out to be dead, or in a new transaction when
        a prepared statement no longer fits its tables. Every tool only reads, so running it
        again is safe. The one place calls are retried."""
        probing = None
        # A caller running as a role of its own has its role set after BEGIN and before the
        # guard's locks (which are taken as that role): no prelude in BEGIN's message.
        assumed = self.assumed()
        if assumed is not None and assumed.role is not None:
            prelude = None
        try:
            for attempt in (1, 2):
                use = (
                    self.session()
                    if own
                    else self.read_only(
                        timeout_ms, explicit=explicit, prelude=prelude() if prelude else None
                    )
                )
                try:
                    async with use as conn:
                        return await work(conn)
                except (ConnectionLostError, StatementChangedError) as exc:
                    if attempt == 2:
                        raise
                    logger.info("%s; running the call again", exc.message)
                    if isinstance(exc, ConnectionLostError):
                        # What closed one session (a restart, an administrator terminating
                        # the server's sessions) has usually closed the pooled others too,
                        # and the driver may not have read their end yet: probe them.
                        probing = _probing.set(True)
            raise AssertionError("unreachable")
        finally:
            if probing is not None:
                _probing.reset(probing)

    @asynccontextmanager
    async def _use(
        self,
        ms: int,
        begin: bool,
        prelude: Prelude | None = None,
        assumed: Assumed | None = None,
    ) -> AsyncIterator[asyncpg.Connection]:
        """Check out, begin if asked (always behind a transaction pooler, and for a caller
        with a role or settings of its own: they are LOCAL to the transaction), map failures
        to PgMcpErrors, and release in the background."""
        try:
            sa_conn, conn = await self._checkout()
        except Exception as exc:
            raise _refused(_mapped(exc, ms)) from None
        explicit = begin or bool(self.pooled) or prelude is not None or assumed is not None
        transaction = _transaction.set(Transaction(conn, ms) if explicit else None)
        role = acting_role.set(assumed.role if assumed is not None else None)
        reused = conn in self._used
        self._used.add(conn)
        backends = None if self.pooled else request_backends.get()
        pid = conn.get_server_pid()
        if backends is not None:
            backends.add(pid)
        try:
            if explicit:
                await self._begin(conn, ms, prelude)
                await self.assume(conn, assumed)
            yield conn
        except PgMcpError:
            raise
        except Exception as exc:
            mapped = _mapped(exc, ms)
            if isinstance(mapped, DatabaseConnectionError) and conn.is_closed() and reused:
                raise ConnectionLostError(
                    "A pooled database connection had been closed by the server"
                ) from None
            raise mapped from None
        finally:
            acting_role.reset(role)
            _transaction.reset(transaction)
            if backends is not None:
                backends.discard(pid)
            self._release(sa_conn, conn, explicit)

    async def _begin(self, conn: asyncpg.Connection, ms: int, prelude: Prelude | None) -> None:
        """BEGIN READ ONLY with the call's timeout, and the prelude in the same message: its
        lock waits end with the call's timeout, as an error naming what it waited for."""
        if prelude is None or not prelude.sql:
            await conn.execute(_BEGIN.format(ms=ms))
            return
        await send_locks(conn, f"{_BEGIN.format(ms=ms)}; {prelude.sql}", prelude, ms)
        found = transaction_of(conn)
        assert found is not None
        found.locked.update(prelude.locked)
        found.search_path = prelude.search_path

    def _release(self, sa_conn: AsyncConnection, conn: asyncpg.Connection, began: bool) -> None:
        """Roll back and reset in the background: the caller has its answer already, and a
        cancelled call cannot interrupt the clean-up. dispose() waits for what is pending."""
        if conn in self._raw_types:
            end = _discard(sa_conn)
        elif self.pooled:
            # Outside a transaction (a custom write tool committed), there is nothing left
            # here to clear: the next statement may reach another server connection.
            end = _end(sa_conn, conn, self._pooled_end if conn.is_in_transaction() else "")
        else:
            rollback = "ROLLBACK; " if began or conn.is_in_transaction() else ""
            end = _end(sa_conn, conn, rollback + self._reset)
        task = asyncio.get_running_loop().create_task(end)
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)

    async def cancel(self, backends: set[int]) -> None:
        """Cancel what these backends are running (a role may always cancel its own)."""
        if backends and not self.pooled:
            async with self.session(as_caller=False) as conn:
                await conn.execute(
                    _CANCEL,
                    sorted(backends),
                )

    def server_pids(self) -> set[int]:
        """The backends of this pool's open connections (several databases: a request's
        backends are cancelled only on the database that has them)."""
        return {c.get_server_pid() for c in self._used if not c.is_closed()}

    async def ping(self) -> None:
        async with self.session(as_caller=False) as conn:
            await conn.fetchval("SELECT 1")

    async def dispose(self) -> None:
        if self._releasing:
            await asyncio.gather(*self._releasing, return_exceptions=True)
        await self.engine.dispose()


def _mapped(exc: Exception, ms: int) -> Exception:
    if isinstance(exc, PgMcpError):
        return exc
    return translate(exc, timeout_ms=ms) or exc


def _refused(exc: Exception) -> Exception:
    """A connection that could not be had is the connection's failure, whatever SQLSTATE
    PostgreSQL gave (a database with ALLOW_CONNECTIONS false answers 55000, which for a
    statement would be INVALID_SQL); the role checks' own refusals stay as they are."""
    if isinstance(exc, InvalidSqlError):
        return DatabaseConnectionError(
            "The database refused the connection: " + exc.message, context=exc.context
        )
    return exc


def _reason(exc: BaseException) -> str:
    """One short line about a routine failure (no traceback, nothing from a DSN)."""
    if isinstance(exc, asyncpg.PostgresError):
        return f"{type(exc).__name__}: {(exc.message or '')[:200]}"
    return type(exc).__name__


async def _end(sa_conn: AsyncConnection, conn: asyncpg.Connection, sql: str) -> None:
    """Roll back, reset the session and return it to the pool; one that cannot be reset
    (lost, or cancelled mid-statement) is discarded. asyncpg waits for a cancelled statement's
    answer before it sends this."""
    try:
        if not conn.is_closed():
            if sql:
                await conn.execute(sql)
            await sa_conn.close()
            return
        logger.info("discarding a pooled connection the server closed")
    except Exception as exc:
        logger.info("discarding a pooled connection that could not be reset (%s)", _reason(exc))
    await _discard(sa_conn)


# Set for a call run again after a lost connection (Database.run): its checkout probes each
# pooled session with a round trip before handing it out.
_probing: ContextVar[bool] = ContextVar("probing", default=False)


async def _answers(conn: asyncpg.Connection) -> bool:
    try:
        await conn.fetchval("SELECT 1")
    except Exception:
        return False
    return True


async def _discard(sa_conn: AsyncConnection) -> None:
    """Drop a connection from the pool; closing a broken one must not raise in turn."""
    try:
        await sa_conn.invalidate()
        await sa_conn.close()
    except Exception as exc:
        logger.debug("closing a broken connection raised %s", _reason(exc))

"""Check every definition's SQL against the live database at start (and at each reload), so
that a typo or a missing table fails then, naming the definition, not at the first call.

Each statement is first qualified (custom/resolve.py: what it names outside pg_catalog gets
its schema, so that it can run under `search_path = pg_catalog, pg_temp`), then prepared
(parsed, analysed and described by PostgreSQL, never executed) under that path in a
transaction that is rolled back; a pl-func tool's temporary function is created and its call
described the same way (which also compiles its body where the language's validator does).
What the descriptions say (parameter and result types) gives the tools their output schemas.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from dataclasses import dataclass, field

import asyncpg

from pg_mcp_server.custom import plcode
from pg_mcp_server.custom.resolve import (
    SET_PATH,
    SET_RESTRICTED,
    Invalid,
    Refused,
    pl_path,
    resolve,
    trusted_roles,
)
from pg_mcp_server.custom.runner import Column, duplicated
from pg_mcp_server.custom.specs import (
    Definitions,
    DefinitionsError,
    ResourceSpec,
    ToolSpec,
    Where,
)
from pg_mcp_server.database.guard import SqlGuard
from pg_mcp_server.database.pool import Database
from pg_mcp_server.database.sql import statement
from pg_mcp_server.errors import InvalidSqlError, PgMcpError

logger = logging.getLogger(__name__)
_NAMED = 5  # objects a warning names (one bounded line)
# What the guard's walk is asked of custom SQL (see _Checker._bodies): bodies on a path with
# an open schema, and names that bodies look up in one (attack5 F1).
_BODY_RULES = frozenset({"open_schema_body", "open_schema_code"})

# Languages code may be written in (C and internal functions are not code of the file).
LANGUAGES = statement(
    "custom.check.LANGUAGES",
    "SELECT lanname::text FROM pg_catalog.pg_language WHERE lanname NOT IN ('c', 'internal')",
)
AVAILABLE = statement(
    "custom.check.AVAILABLE",
    "SELECT name FROM pg_catalog.pg_available_extensions WHERE name = ANY($1::text[])",
)


@dataclass(frozen=True)
class Described:
    parameters: int
    columns: list[Column]


@dataclass
class Checked:
    """What the check learnt: each definition's description (keyed `tool <name>`), each
    custom statement as it runs (qualified, for the restricted path), and the path PL code
    runs on."""

    described: dict[str, Described] = field(default_factory=dict)
    sql: dict[str, str] = field(default_factory=dict)
    pinned: set[str] = field(default_factory=set)  # (originals) every name qualified
    pl_path: str = "pg_catalog, pg_temp"
    # schemas of the server's path left out of pl_path (roles that are not trusted may
    # create there, see resolve.PL_PATH)
    left_out: tuple[str, ...] = ()

    def path(self, sql: str) -> str | None:
        """The path `sql` runs on once prepared: the PL path when nothing in it depends on
        the path (what it calls then finds what it finds when others call it), else None:
        it stays on the restricted one."""
        return self.pl_path if sql in self.pinned else None


class _Bad(Exception):
    pass


def _message(exc: asyncpg.PostgresError, sql: str | None = None, at: int | None = None) -> str:
    """PostgreSQL's error, with the line of `sql` it points at (`at`, 0-based, when the
    error's own position is in another text)."""
    text = exc.message or type(exc).__name__
    position = getattr(exc, "position", None)
    if at is None and position and str(position).isdigit():
        at = int(position) - 1
    if sql is not None and at is not None:
        text += f" (line {sql[:at].count(chr(10)) + 1} of the sql)"
    hint = getattr(exc, "hint", None)
    return text + (f"; hint: {hint}" if hint else "")


async def _describe(conn: asyncpg.Connection, sql: str, what: str) -> Described:
    # Under the path it runs on: the driver looks a result's unknown types up on it too.
    await conn.execute(f"BEGIN READ ONLY; {SET_RESTRICTED}")
    try:
        stmt = await conn.prepare(sql)
    except asyncpg.PostgresError as exc:
        raise _Bad(f"{what}: {_message(exc, sql)}") from None
    finally:
        await conn.execute("ROLLBACK")
    columns = [Column(a.name, a.type) for a in stmt.get_attributes()]
    return Described(len(stmt.get_parameters()), columns)


async def _describe_function(conn: asyncpg.Connection, tool: ToolSpec, path: str) -> Described:
    await conn.execute(f"BEGIN READ WRITE; {SET_RESTRICTED}")
    try:
        await conn.fetchval(SET_PATH, path)  # the body's path (SET search_path FROM CURRENT)
        await conn.execute(tool.statement)
        await conn.execute(SET_RESTRICTED)
        stmt = await conn.prepare(plcode.call_function(tool.function))
    except asyncpg.PostgresError as exc:
        raise _Bad(f"code: {_message(exc)}") from None
    finally:
        await conn.execute("ROLLBACK")
    return Described(1, [Column(a.name, a.type) for a in stmt.get_attributes()])


def _distinct(described: Described) -> None:
    twice = duplicated([c.name for c in described.columns])
    if twice:
        raise _Bad(f"the result has more than one column named {twice}: name them apart (AS ...)")


class _Checker:
    def __init__(
        self,
        defs: Definitions,
        conn: asyncpg.Connection,
        trusted: list[int],
        path: str,
        left_out: list[str],
        allow_open_code: bool,
        bodies: SqlGuard,
    ) -> None:
        self.defs = defs
        self.conn = conn
        self.trusted = trusted
        self.allow_open_code = allow_open_code
        self.bodies = bodies
        self.problems: list[str] = []
        self.where = Where("file", 0, 1)  # the definition being checked (run)
        self.checked = Checked(pl_path=path, left_out=tuple(left_out))
        self.described = self.checked.described

    async def statement(self, sql: str, what: str) -> Described:
        """`sql` qualified (kept for running) and described under the restricted path."""
        try:
            resolved = await resolve(
                self.conn, sql, self.trusted, allow_open_code=self.allow_open_code
            )
        except Refused as exc:
            raise _Bad(f"{what}: {exc}") from None
        except Invalid as invalid:
            raise _Bad(f"{what}: {_message(invalid.error, sql, invalid.position)}") from None
        except asyncpg.PostgresError as exc:
            raise _Bad(f"{what}: {_message(exc)}") from None
        await self._bodies(resolved.sql, what)
        for ignored in resolved.ignored:
            logger.warning(
                "custom definitions: %s resolves to %s, whose name is pg_catalog's and whose "
                "owner is not trusted (what a planted object looks like); pg_catalog's is used",
                self.defs.problem(self.where, what),
                ignored,
            )
        if resolved.unguarded:
            named = resolved.unguarded
            logger.warning(
                "custom definitions: %s uses %s%s, whose owner (neither trusted nor the "
                "server's role) can change what it runs at any time: custom SQL is not "
                "guarded, so that would run as the server's role, in the call's read-only "
                "transaction; add the owner to MCP_TRUSTED_ROLES if you trust it",
                self.defs.problem(self.where, what),
                ", ".join(named[:_NAMED]),
                f" and {len(named) - _NAMED} more" if len(named) > _NAMED else "",
            )
        described = await _describe(self.conn, resolved.sql, what)
        self.checked.sql[sql] = resolved.sql
        if resolved.pinned:
            self.checked.pinned.add(sql)
        return described

    async def run(self, where: Where, check: Awaitable[None]) -> None:
        self.where = where
        try:
            await check
        except _Bad as bad:
            self.problems.append(self.defs.problem(where, str(bad)))

    async def tool(self, tool: ToolSpec, languages: set[str], available: set[str]) -> None:
        if tool.type != "sql" and tool.language not in languages:
            hint = (
                f"CREATE EXTENSION {tool.language} would install it"
                if tool.language in available
                else "the server does not have it"
            )
            raise _Bad(f"language {tool.language} is not installed in the database ({hint})")
        if tool.type == "pl-do":
            return  # a DO block cannot be described without running it
        if tool.type == "sql":
            described = await self.statement(tool.sql, "sql")
            if described.parameters > len(tool.properties):
                raise _Bad(
                    f"sql uses ${described.parameters} but input_schema has "
                    f"{len(tool.properties)} properties to bind ($1, $2, ... in order)"
                )
        else:
            described = await _describe_function(self.conn, tool, self.checked.pl_path)
        _distinct(described)
        self.described[f"tool {tool.name}"] = described

    async def resource(self, resource: ResourceSpec) -> None:
        if resource.type == "sql":
            described = await self.statement(resource.sql, "sql")
            bound = len(resource.parameters)
            if described.parameters > bound:
                raise _Bad(
                    f"sql uses ${described.parameters} but the uri has {bound} parameters "
                    "to bind ($1, $2, ... in the order they appear)"
                )
            _distinct(described)
        for parameter in resource.parameters:
            await self.completion(parameter.name, parameter.completion)

    async def _bodies(self, sql: str, what: str) -> None:
        """Refuse `sql` (as it will run) when it reaches, through the functions it calls and
        theirs, a body that PostgreSQL resolves when it runs on a search path with an open
        schema (a function's own SET search_path), or that names a function or operator of
        one (`public.norm(x)`): what the guard refuses as `open_schema_body` and
        `open_schema_code` for every statement it judges (resolve.py sees the functions custom
        SQL calls, not what their bodies call). MCP_ALLOW_OPEN_SCHEMA_CODE allows the names
        bodies look up in an open schema, as it does for statements."""
        try:
            async with self.conn.transaction(readonly=True):
                await self.bodies.check_reach(sql, self.conn)
        except InvalidSqlError as exc:  # what it calls cannot be followed: refused too
            raise _Bad(f"{what}: {exc.message} {exc.suggestion or ''}".rstrip()) from None
        except PgMcpError as exc:
            if (exc.context or {}).get("rule", "") in _BODY_RULES:
                raise _Bad(f"{what}: {exc.message} {exc.suggestion}") from None
            # Anything else the guard would say is not for custom SQL to hear (its SQL is the
            # operator's; a catalog that kept changing or a lock wait is not a refusal).
        except asyncpg.PostgresError as exc:  # (what PostgreSQL says of it comes next)
            logger.debug("custom definitions: %s: the guard's walk stopped: %s", what, exc)

    async def completion(self, argument: str, sql: str | None) -> None:
        if sql is None:
            return
        described = await self.statement(sql, f"argument {argument}: completion")
        if len(described.columns) != 1 or described.parameters > 1:
            raise _Bad(
                f"argument {argument}: completion must return one column and use at most $1 "
                "(the text typed so far)"
            )


async def check(
    defs: Definitions,
    db: Database,
    trusted: list[str] | None = None,
    *,
    allow_open_code: bool = False,
) -> Checked:
    """What PostgreSQL says about each definition's SQL; raises DefinitionsError listing
    every definition it refuses, and the pool's PgMcpError when the database cannot be
    reached. `trusted`: MCP_TRUSTED_ROLES; `allow_open_code`: MCP_ALLOW_OPEN_SCHEMA_CODE
    (see resolve.py). The server's own check: as the login role, whoever's request (if any)
    the start or a reload happens in."""
    async with db.session(as_caller=False) as conn:
        roles = await trusted_roles(conn, list(trusted or ()))
        path, left_out = await pl_path(conn, roles)
        if left_out:
            logger.warning(
                "custom definitions: schema(s) %s of the search path are left off the path "
                "custom SQL and PL code run on: roles that are not trusted may create objects "
                "there (an operator planted there would be picked inside a function's body); "
                "name their objects with the schema, or revoke CREATE (REVOKE CREATE ON "
                "SCHEMA public FROM PUBLIC)",
                ", ".join(left_out),
            )
        bodies = SqlGuard(
            strict_comments=False,
            trusted_roles=tuple(trusted or ()),
            allow_open_schema_code=allow_open_code,
            custom=_BODY_RULES,
        )
        checker = _Checker(defs, conn, roles, path, left_out, allow_open_code, bodies)
        languages = {r["lanname"] for r in await conn.fetch(LANGUAGES)}
        wanted = sorted({t.language for t in defs.tools if t.type != "sql"} - languages)
        available = {r["name"] for r in await conn.fetch(AVAILABLE, wanted)} if wanted else set()
        for tool in defs.tools:
            await checker.run(tool.where, checker.tool(tool, languages, available))
        for resource in defs.resources:
            await checker.run(resource.where, checker.resource(resource))
        for prompt in defs.prompts:
            for argument in prompt.arguments:
                await checker.run(
                    prompt.where, checker.completion(argument.name, argument.completion)
                )
    if checker.problems:
        raise DefinitionsError(checker.problems)
    return checker.checked

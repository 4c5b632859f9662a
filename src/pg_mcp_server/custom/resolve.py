"""Custom SQL held to the rules of our own: no name in it can be taken over by a planted object.

A role that may create objects in a schema on the search path (`public`, on databases made
before PostgreSQL 15) can plant `public.=(mood, mood)` or `public.enum_range(mood)`: an exact
match of the argument types beats pg_catalog's polymorphic built-in, even with pg_catalog
first on the path (CVE-2018-1058), so a definition comparing an enum would run the planted
function as the server's role. So would asyncpg's own type lookup (`typelem <> 0`, oid
against integer), which runs on the same connection when a result has a type it does not
know. So, once per statement when the file is checked:

1. the statement is analysed as PostgreSQL analyses it (the body of a temporary
   `BEGIN ATOMIC` function, on the server's search path, rolled back): PostgreSQL records
   every non-built-in function, operator, type and relation it resolved to (pg_depend);
2. each unqualified name is qualified with the schema of the object of that name the
   statement resolved to (pinned.qualify), and everything else is pinned to pg_catalog
   (pinned.pin), as our own SQL is. An object whose name pg_catalog also has, owned by a
   role that is not trusted (not a superuser, the database's owner, the server's role nor in
   MCP_TRUSTED_ROLES, nor a trusted extension's member), is what a planted object looks
   like: it is left out, and pg_catalog's is used;
3. the result is analysed again under `search_path = pg_catalog, pg_temp` and must resolve
   to exactly the objects the original did (but for those left out), or the file is
   refused with the name to qualify.

Each call prepares the statement under that restricted path (runner.py), so the driver's
type lookup sees pg_catalog only; a fully pinned statement then runs on the PL path below
(what it calls sees the path it would see for any caller), one that pin() cannot write
(JOIN ... USING and the like) stays on the restricted path. Where no probe can be made (a
standby, a role without TEMP), names are looked up instead (_looked_up).

PL code (pl-do blocks, pl-func bodies) is not rewritten: it runs on a fixed path, pg_catalog,
then the schemas of the server's search path at the check but those a role that is not
trusted may create in (PL_PATH), then pg_temp (see docs/custom-definitions.md).

Its size (~500 lines) is one procedure (probe, dependencies, choice, rewrite) whose steps
share the probe's findings.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg
from pglast import ast, enums, parse_sql
from pglast.stream import RawStream

from pg_mcp_server.database.guard import OPEN_SCHEMA, TRUSTED_ROLES
from pg_mcp_server.database.sql import (
    Kind,
    UnpinnableSqlError,
    pin,
    qualify,
    statement,
    unqualified_names,
    written_qualified,
)

RESTRICTED = "pg_catalog, pg_temp"
SET_RESTRICTED = f"SET LOCAL search_path = {RESTRICTED}"
PROBE = "mcp_probe"

# The server's search path as names, for PL code: pg_catalog first, pg_temp last, and
# without the schemas a role that is not trusted may create in ($1: their oids, see
# guard/facts.OPEN_SCHEMA), which are given as `left_out`: a trusted function's body that resolves
# an operator there when it runs would pick one planted with a closer match.
_OPEN = OPEN_SCHEMA.format(trusted="$1::pg_catalog.oid[]")
_OPEN_2 = OPEN_SCHEMA.format(trusted="$2::pg_catalog.oid[]")
PL_PATH = statement(
    "custom.resolve.PL_PATH",
    f"""
WITH path AS (
  SELECT u.s, u.i, EXISTS (SELECT FROM pg_catalog.pg_namespace n
                           WHERE n.nspname = u.s AND {_OPEN}) AS open
  FROM pg_catalog.unnest(pg_catalog.current_schemas(false)) WITH ORDINALITY AS u(s, i)
  WHERE u.s <> 'pg_catalog')
SELECT pg_catalog.array_to_string(
         ARRAY['pg_catalog']
         || ARRAY(SELECT pg_catalog.quote_ident(s) FROM path WHERE NOT open ORDER BY i)
         || ARRAY['pg_temp'], ', ') AS path,
       -- text[], not name[]: a type asyncpg knows without a look-up query of its own
       ARRAY(SELECT s::pg_catalog.text FROM path WHERE open ORDER BY i) AS left_out
""",
)
SET_PATH = "SELECT pg_catalog.set_config('search_path', $1, true)"
PARAMETERS = statement(
    "custom.resolve.PARAMETERS",
    """
SELECT n.nspname::pg_catalog.text AS schema, t.typname::pg_catalog.text AS name
FROM pg_catalog.unnest((SELECT s.parameter_types::pg_catalog.oid[]
                        FROM pg_catalog.pg_prepared_statements s WHERE s.name = $1))
     WITH ORDINALITY AS p (oid, n)
JOIN pg_catalog.pg_type t ON t.oid = p.oid
JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
ORDER BY p.n
""",
)
DEALLOCATE = f"DEALLOCATE {PROBE}"
PROBE_OID = statement(
    "custom.resolve.PROBE_OID", f"SELECT 'pg_temp.{PROBE}'::pg_catalog.regproc::pg_catalog.oid"
)
# What the probe function depends on: every non-built-in object its body resolved to.
DEPENDENCIES = statement(
    "custom.resolve.DEPENDENCIES",
    f"""
SELECT k.kind, d.refclassid::pg_catalog.oid AS cls, d.refobjid AS oid,
       n.nspname::pg_catalog.text AS schema,
       k.name, k.label,
       (k.owner = ANY ($2::pg_catalog.oid[]) OR EXISTS (
          SELECT FROM pg_catalog.pg_depend e
          JOIN pg_catalog.pg_extension x ON x.oid = e.refobjid
          WHERE e.classid = d.refclassid AND e.objid = d.refobjid AND e.deptype = 'e'
            AND x.extowner = ANY ($2::pg_catalog.oid[]))) AS trusted,
       k.builtin_name,
       k.owner = (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = CURRENT_USER) AS own,
       k.path,
       -- the schemas a function's own search_path names that roles not trusted may create in
       ARRAY(SELECT n.nspname::pg_catalog.text FROM pg_catalog.pg_namespace n
             WHERE n.nspname = ANY (pg_catalog.string_to_array(
                       pg_catalog.replace(pg_catalog.replace(k.path, '"', ''), ' ', ''), ','))
               AND {_OPEN_2}) AS open_path,
       {_OPEN_2} AS open_schema,
       k.no_arguments
FROM pg_catalog.pg_depend d
CROSS JOIN LATERAL (
  SELECT 'function' AS kind, p.proname::pg_catalog.text AS name, p.pronamespace AS nsp,
         p.proowner AS owner, p.oid::pg_catalog.regprocedure::pg_catalog.text AS label,
         EXISTS (SELECT FROM pg_catalog.pg_proc b
                 WHERE b.proname = p.proname
                   AND b.pronamespace = 'pg_catalog'::pg_catalog.regnamespace) AS builtin_name,
         (SELECT pg_catalog.substr(c, 13) FROM pg_catalog.unnest(p.proconfig) c
          WHERE c LIKE 'search\\_path=%') AS path,
         p.pronargs = 0 AS no_arguments
  FROM pg_catalog.pg_proc p
  WHERE d.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND p.oid = d.refobjid
  UNION ALL
  SELECT 'operator', o.oprname::pg_catalog.text, o.oprnamespace, o.oprowner,
         o.oid::pg_catalog.regoperator::pg_catalog.text,
         EXISTS (SELECT FROM pg_catalog.pg_operator b
                 WHERE b.oprname = o.oprname
                   AND b.oprnamespace = 'pg_catalog'::pg_catalog.regnamespace),
         NULL::pg_catalog.text, false
  FROM pg_catalog.pg_operator o
  WHERE d.refclassid = 'pg_catalog.pg_operator'::pg_catalog.regclass AND o.oid = d.refobjid
  UNION ALL
  SELECT 'type', t.typname::pg_catalog.text, t.typnamespace, t.typowner,
         t.oid::pg_catalog.regtype::pg_catalog.text,
         EXISTS (SELECT FROM pg_catalog.pg_type b
                 WHERE b.typname = t.typname
                   AND b.typnamespace = 'pg_catalog'::pg_catalog.regnamespace),
         NULL::pg_catalog.text, false
  FROM pg_catalog.pg_type t
  WHERE d.refclassid = 'pg_catalog.pg_type'::pg_catalog.regclass AND t.oid = d.refobjid
  UNION ALL
  SELECT 'relation', c.relname::pg_catalog.text, c.relnamespace, c.relowner,
         c.oid::pg_catalog.regclass::pg_catalog.text,
         EXISTS (SELECT FROM pg_catalog.pg_class b
                 WHERE b.relname = c.relname
                   AND b.relnamespace = 'pg_catalog'::pg_catalog.regnamespace),
         NULL::pg_catalog.text, false
  FROM pg_catalog.pg_class c
  WHERE d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass AND c.oid = d.refobjid
) k
JOIN pg_catalog.pg_namespace n ON n.oid = k.nsp
WHERE d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND d.objid = $1
""",
)
TRUSTED = statement(
    "custom.resolve.TRUSTED", f"SELECT {TRUSTED_ROLES.format(names='$1::pg_catalog.text[]')}"
)  # the guard's trusted roles


class Refused(Exception):
    """A statement that cannot be held to the rules: the message says what to write."""


@dataclass(frozen=True)
class Dependency:
    kind: Kind
    cls: int
    oid: int
    schema: str
    name: str
    label: str  # regprocedure / regoperator / regtype / regclass text
    trusted: bool
    builtin_name: bool  # pg_catalog has an object of this kind and name
    own: bool  # owned by the server's role
    path: str | None  # a function's own search_path
    open_path: list[str]  # the schemas there that roles not trusted may create in
    open_schema: bool  # in a schema that roles not trusted may create in
    # A function without arguments: a call of it by name resolves to it alone (a planted
    # overload with defaults makes the call ambiguous, one with VARIADIC loses to it).
    no_arguments: bool

    @property
    def shadow(self) -> bool:
        """What a planted object looks like: a built-in's name, owned by a role not trusted."""
        return self.builtin_name and not self.trusted and self.schema != "pg_catalog"

    @property
    def unguarded(self) -> bool:
        """Used as it is, though its owner, neither trusted nor the server's role, can change
        what it runs at any time (a view's query, a table's policies, a function's body, an
        operator's estimators, a domain's checks): custom SQL has no per-call check."""
        return not (self.trusted or self.own or self.shadow or self.schema == "pg_catalog")


async def trusted_roles(conn: asyncpg.Connection, names: list[str]) -> list[int]:
    value: list[int] = await conn.fetchval(TRUSTED, names)
    return value


async def pl_path(conn: asyncpg.Connection, trusted: list[int]) -> tuple[str, list[str]]:
    """The path PL code and fully qualified custom SQL run on, and the schemas of the
    server's path left out of it (see PL_PATH)."""
    row = await conn.fetchrow(PL_PATH, trusted)
    assert row is not None
    return row["path"], list(row["left_out"])


def _rows(stmt: ast.Node) -> bool:
    if isinstance(stmt, ast.SelectStmt):
        return True
    return bool(getattr(stmt, "returningList", None))


def _probe(stmt: ast.Node, parameters: list[tuple[str, str]]) -> str:
    """CREATE FUNCTION pg_temp.mcp_probe(<parameter types>) whose BEGIN ATOMIC body is `stmt`,
    built as a tree (the statement is never spliced in as text)."""
    template = parse_sql(
        f"CREATE FUNCTION pg_temp.{PROBE}() RETURNS SETOF record LANGUAGE sql "
        "BEGIN ATOMIC SELECT; END"
    )[0].stmt
    assert isinstance(template, ast.CreateFunctionStmt)
    template.parameters = tuple(
        ast.FunctionParameter(
            argType=ast.TypeName(names=(ast.String(schema), ast.String(name))),
            mode=enums.FunctionParameterMode.FUNC_PARAM_DEFAULT,
        )
        for schema, name in parameters
    )
    if not _rows(stmt):
        template.returnType = ast.TypeName(names=(ast.String("pg_catalog"), ast.String("void")))
    template.sql_body = ((stmt,),)
    text: str = RawStream()(template)
    return text


async def _dependencies(
    conn: asyncpg.Connection, sql: str, parameters: list[tuple[str, str]], trusted: list[int]
) -> list[Dependency]:
    """What `sql` resolves to on the connection's current path (in the caller's transaction;
    the probe function is dropped again)."""
    (raw,) = parse_sql(sql)
    assert raw.stmt is not None
    await conn.execute(_probe(raw.stmt, parameters))
    oid = await conn.fetchval(PROBE_OID)
    rows = await conn.fetch(DEPENDENCIES, oid, trusted)
    await conn.execute(f"DROP FUNCTION pg_temp.{PROBE}")
    return [Dependency(**dict(r)) for r in rows]


class Invalid(Exception):
    """PostgreSQL refused the statement itself: its error, and where in the operator's text
    it points (0-based), if anywhere."""

    def __init__(self, error: asyncpg.PostgresError, position: int | None) -> None:
        super().__init__(error.message)
        self.error = error
        self.position = position


async def _parameters(conn: asyncpg.Connection, sql: str) -> list[tuple[str, str]]:
    """The parameter types PostgreSQL infers for `sql`, read from a SQL-level PREPARE: the
    driver's prepare would look unknown types up on the server's path, planted or not.
    Raises Invalid when PostgreSQL refuses the statement."""
    (raw,) = parse_sql(sql)
    printed = RawStream()(ast.PrepareStmt(name=PROBE, query=raw.stmt))
    try:
        await conn.execute(printed)
    except asyncpg.PostgresError as exc:
        where = getattr(exc, "position", None)
        at = int(where) - 1 if where and str(where).isdigit() else None
        raise Invalid(exc, None if at is None else _position(sql, printed, at)) from None
    try:
        rows = await conn.fetch(PARAMETERS, PROBE)
    finally:
        await conn.execute(DEALLOCATE)
    return [(r["schema"], r["name"]) for r in rows]


def _locations(node: object) -> list[int]:
    """The locations of a tree's nodes, in an order that two equal trees share."""
    out: list[int] = []
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, tuple):
            stack.extend(reversed(item))
        elif isinstance(item, ast.Node):
            location = getattr(item, "location", None)
            if isinstance(location, int) and location >= 0:
                out.append(location)
            stack.extend(reversed([getattr(item, member) for member in item]))
    return out


def _position(sql: str, printed: str, at: int) -> int | None:
    """Where in `sql` the node is that `at` points at in `printed` (the same statement,
    reprinted inside PREPARE): PostgreSQL reports positions in the text it was sent."""
    (original,) = parse_sql(sql)
    (again,) = parse_sql(printed)
    assert isinstance(again.stmt, ast.PrepareStmt)
    mine, theirs = _locations(original.stmt), _locations(again.stmt.query)
    if len(mine) != len(theirs):
        return None
    best = max(
        (i for i, loc in enumerate(theirs) if loc <= at), key=lambda i: theirs[i], default=None
    )
    return None if best is None else mine[best]


def _choose(deps: list[Dependency], sql: str) -> dict[tuple[Kind, str], str]:
    """For each (kind, name) the statement resolved outside the built-ins: the one schema to
    qualify its unqualified uses with (the schemas it is written qualified with aside).
    Refused when it resolved into several. A guess here is caught by the second probe."""
    written = written_qualified(sql)
    schemas: dict[tuple[Kind, str], set[str]] = {}
    for dep in deps:
        if not dep.shadow and (dep.kind, dep.schema, dep.name) not in written:
            schemas.setdefault((dep.kind, dep.name), set()).add(dep.schema)
    chosen = {}
    for (kind, name), found in schemas.items():
        if len(found) > 1:
            spelled = " or ".join(_spelled(kind, s, name) for s in sorted(found))
            raise Refused(
                f"{kind} {name} resolves to objects in schemas {', '.join(sorted(found))}: "
                f"write each use qualified ({spelled})"
            )
        (schema,) = found
        chosen[(kind, name)] = schema
    return chosen


def _spelled(kind: Kind, schema: str, name: str) -> str:
    return f"OPERATOR({schema}.{name})" if kind == "operator" else f"{schema}.{name}"


@dataclass(frozen=True)
class Resolved:
    sql: str  # prepared under search_path = pg_catalog, pg_temp
    pinned: bool  # every name in `sql` is qualified: it may run on the PL path
    ignored: list[str]  # planted-looking objects the original resolved to, not used
    unguarded: tuple[str, ...] = ()  # objects used whose owner can change what they run


async def resolve(
    conn: asyncpg.Connection, sql: str, trusted: list[int], *, allow_open_code: bool = False
) -> Resolved:
    """`sql` qualified as the module says, checked to resolve under the restricted path to
    what it resolves to on the server's; refused when it uses a function (but one without
    arguments, which only an exact match can replace) or an operator of a schema that roles
    not trusted may create in, unless `allow_open_code` (MCP_ALLOW_OPEN_SCHEMA_CODE): its
    name, qualified, is still looked up there at every call, where an overload planted later
    with a closer match of argument types would be picked. Runs in a transaction of its own,
    always rolled back (the probe functions are temporary). Where no temporary function can
    be made (a standby, a role without TEMP), names are looked up instead (_looked_up).
    Raises Refused, or the driver's PostgresError when PostgreSQL refuses the statement
    itself."""
    probing = True
    try:
        await conn.execute("BEGIN READ WRITE")
    except (asyncpg.ReadOnlySQLTransactionError, asyncpg.FeatureNotSupportedError):
        probing = False  # a standby ("cannot set transaction read-write mode during recovery")
        await conn.execute("ROLLBACK; BEGIN READ ONLY")
    try:
        parameters = await _parameters(conn, sql)
        if probing:
            await conn.execute("SAVEPOINT mcp_probe")
            try:
                before: list[Dependency] | None = await _dependencies(
                    conn, sql, parameters, trusted
                )
            except (asyncpg.InsufficientPrivilegeError, asyncpg.ReadOnlySQLTransactionError):
                await conn.execute("ROLLBACK TO SAVEPOINT mcp_probe")
                before = None
        else:
            before = None
        if before is None:
            return await _looked_up(conn, sql)
        for d in before:
            if d.open_path:
                raise Refused(
                    f"it calls {d.label}, whose own search_path ({d.path}) names "
                    f"{', '.join(d.open_path)}, where roles that are not trusted may create "
                    "objects: an operator or function planted there with a closer match would "
                    "run inside it, as the server's role; give that function a search_path "
                    "without such schemas (its objects named with their schema), or revoke "
                    "CREATE on them from the roles you do not trust"
                )
            code = d.kind == "operator" or (d.kind == "function" and not d.no_arguments)
            if code and d.open_schema and not d.shadow and not allow_open_code:
                raise Refused(
                    f"it uses {d.kind} {d.label}, of schema {d.schema}, where roles that are "
                    "not trusted may create objects: its name is looked up there at every "
                    "call, and one planted there with a closer match of argument types would "
                    "run instead, as the server's role; revoke CREATE on that schema from the "
                    f"roles you do not trust (REVOKE CREATE ON SCHEMA {d.schema} FROM PUBLIC), "
                    "or accept the risk with MCP_ALLOW_OPEN_SCHEMA_CODE=true"
                )
        chosen = _choose(before, sql)
        text, pinned = _rewritten(sql, chosen)
        kept = {(d.cls, d.oid) for d in before if not d.shadow}
        ignored = [d for d in before if d.shadow]
        await conn.execute(SET_RESTRICTED)
        try:
            after = await _dependencies(conn, text, parameters, trusted)
        except asyncpg.PostgresError as exc:
            raise Refused(_unresolved(exc.message, ignored, chosen)) from None
        now = {(d.cls, d.oid) for d in after}
        if now != kept:
            lost = sorted(d.label for d in before if (d.cls, d.oid) in kept - now)
            new = sorted(d.label for d in after if (d.cls, d.oid) in now - kept)
            changes = ([f"no longer {', '.join(lost)}"] if lost else []) + (
                [f"now {', '.join(new)}"] if new else []
            )
            raise Refused(
                f"it resolves differently once its names are pinned ({'; '.join(changes)}): "
                "a construct that cannot be qualified (JOIN ... USING, IN (...), "
                "BETWEEN, CASE x WHEN, NULLIF, IS DISTINCT FROM, LIKE) used an operator "
                "outside pg_catalog, or one name means objects in two schemas; write those "
                "uses with a qualified operator (a OPERATOR(schema.=) b) or function"
            )
    finally:
        await conn.execute("ROLLBACK")
    return Resolved(
        text,
        pinned,
        [f"{d.kind} {d.label}" for d in ignored],
        tuple(dict.fromkeys(f"{d.kind} {d.label}" for d in before if d.unguarded)),
    )


def _rewritten(sql: str, chosen: dict[tuple[Kind, str], str]) -> tuple[str, bool]:
    """`sql` qualified with `chosen`, then pinned if it can be (and whether it was)."""
    try:
        text = qualify(sql, lambda kind, name: chosen.get((kind, name)))
    except UnpinnableSqlError as exc:
        raise Refused(str(exc)) from None
    try:
        return pin(text, qualified=True), True
    except UnpinnableSqlError:
        return text, False  # JOIN USING and the like: safe on the restricted path only


# Without a probe: where each unqualified name of a statement is found on the server's path.
LOOKUP = statement(
    "custom.resolve.LOOKUP",
    """
SELECT k.kind, k.name,
  CASE k.kind
    WHEN 'relation' THEN (
      SELECT n.nspname::pg_catalog.text FROM pg_catalog.pg_class c
      JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
      WHERE c.oid = pg_catalog.to_regclass(pg_catalog.quote_ident(k.name)))
    WHEN 'type' THEN (
      SELECT n.nspname::pg_catalog.text FROM pg_catalog.pg_type t
      JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
      WHERE t.oid = pg_catalog.to_regtype(pg_catalog.quote_ident(k.name)))
  END AS schema,
  ARRAY(
    SELECT s.nsp::pg_catalog.text
    FROM pg_catalog.unnest(pg_catalog.current_schemas(true)) AS s (nsp)
    WHERE (k.kind = 'function' AND EXISTS (
             SELECT FROM pg_catalog.pg_proc p
             JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
             WHERE n.nspname = s.nsp AND p.proname = k.name))
       OR (k.kind = 'operator' AND EXISTS (
             SELECT FROM pg_catalog.pg_operator o
             JOIN pg_catalog.pg_namespace n ON n.oid = o.oprnamespace
             WHERE n.nspname = s.nsp AND o.oprname = k.name))) AS schemas
FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.text[]), pg_catalog.unnest($2::pg_catalog.text[]))
     AS k (kind, name)
""",
)


async def _looked_up(conn: asyncpg.Connection, sql: str) -> Resolved:
    """Where no probe can be made: relations and types qualified where the server's path
    finds them (PostgreSQL's own rule for them), a function or operator name pg_catalog has
    left to pg_catalog, any other qualified with the one schema on the path that has it.
    Nothing compares what the statement resolved to: an extension's operator of a built-in
    name (citext's =) is not used. Then prepared on the restricted path, which must work."""
    names = sorted(unqualified_names(sql))
    rows = await conn.fetch(LOOKUP, [k for k, _ in names], [n for _, n in names])
    chosen: dict[tuple[Kind, str], str] = {}
    for row in rows:
        kind, name, schema, schemas = row["kind"], row["name"], row["schema"], row["schemas"]
        if kind in ("relation", "type"):
            if schema is not None and schema != "pg_catalog" and not schema.startswith("pg_temp"):
                chosen[(kind, name)] = schema
        elif "pg_catalog" not in schemas and len(schemas) > 1:
            spelled = " or ".join(_spelled(kind, s, name) for s in schemas)
            raise Refused(f"{kind} {name} is in schemas {', '.join(schemas)}: write it qualified "
                          f"({spelled})")  # fmt: skip
        elif "pg_catalog" not in schemas and schemas:
            chosen[(kind, name)] = schemas[0]
    text, pinned = _rewritten(sql, chosen)
    await conn.execute(SET_RESTRICTED)
    prepare = ast.PrepareStmt(name=PROBE, query=parse_sql(text)[0].stmt)
    try:
        await conn.execute(RawStream()(prepare))
    except asyncpg.PostgresError as exc:
        raise Refused(_unresolved(exc.message, [], chosen)) from None
    await conn.execute(DEALLOCATE)
    return Resolved(text, pinned, [])


def _unresolved(
    message: str, ignored: list[Dependency], chosen: dict[tuple[Kind, str], str]
) -> str:
    why = f"once its names are pinned, PostgreSQL says: {message}"
    if ignored:
        names = ", ".join(f"{d.kind} {d.label}" for d in ignored)
        why += (
            f". It resolved to {names}, whose name is also pg_catalog's and whose owner is "
            "not trusted (what a planted object looks like), so pg_catalog's is used: if "
            "that object is meant, write it qualified, or add its owner to MCP_TRUSTED_ROLES"
        )
    elif chosen:
        why += (
            ". A name outside pg_catalog is used for objects of two schemas, or with "
            "pg_catalog's too: write those uses qualified"
        )
    return why

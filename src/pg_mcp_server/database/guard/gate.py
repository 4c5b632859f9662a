"""Read-only SQL validation with PostgreSQL's own parser (pglast).

The guard decides before PostgreSQL sees the statement: parse analysis and planning already
run code (a literal cast to a domain checks its constraints, the planner folds stable
functions and calls selectivity functions), so even a plain EXPLAIN must not reach anything
unsafe. PostgreSQL is the backstop (user SQL runs read-only and is rolled back), but a
read-only transaction still allows side effects such as advisory locks, `set_config`, an XID
consumed, statistics reset or a sequence advanced. So the guard allows exactly one SELECT, and
only when every object it may reach, and all the code those run, is safe for a reader (see
database/guard/rules.py for what "safe" means, database/guard/reach.py for what a statement reaches,
database/guard/state.py for how current the facts are).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from pglast import ast, parse_sql, parser, stream, visitors

from pg_mcp_server.database.guard.reach import Plan
from pg_mcp_server.database.guard.rules import RELATION, TYPE, Refusal
from pg_mcp_server.database.guard.state import GuardState
from pg_mcp_server.database.pool import Prelude, acting_role
from pg_mcp_server.database.sql import Refs, refs_of, tree as sqltree, walk
from pg_mcp_server.errors import InvalidSqlError, PgMcpError, WriteOperationDeniedError

# PRD 8.1: these words are refused even inside comments (an agent hiding intent, or a
# prompt-injected comment, is worth a refusal).
BLOCKED_KEYWORDS = re.compile(
    r"\b(INSERT|UPDATE|DELETE|UPSERT|MERGE|CREATE|ALTER|DROP|TRUNCATE|RENAME|GRANT|REVOKE|"
    r"SET|RESET|DISCARD|VACUUM|ANALYZE|CLUSTER|REINDEX|COPY|BEGIN|COMMIT|ROLLBACK|SAVEPOINT)\b",
    re.IGNORECASE,
)

# Statements up to this length have their names kept (256 of them, most recently used).
_CACHED_SQL_CHARS = 8192

_WRITE_NODES = {
    "InsertStmt": "INSERT",
    "UpdateStmt": "UPDATE",
    "DeleteStmt": "DELETE",
    "MergeStmt": "MERGE",
}

_STATEMENT_NAMES = {
    **_WRITE_NODES,
    "VariableSetStmt": "SET",
    "VariableShowStmt": "SHOW",
    "TransactionStmt": "transaction control",
    "DoStmt": "DO",
    "CopyStmt": "COPY",
    "ExplainStmt": "EXPLAIN (use the explain_query tool)",
    "CallStmt": "CALL",
    "LockStmt": "LOCK",
    "NotifyStmt": "NOTIFY",
    "ListenStmt": "LISTEN",
    "DiscardStmt": "DISCARD",
    "TruncateStmt": "TRUNCATE",
    "GrantStmt": "GRANT/REVOKE",
    "VacuumStmt": "VACUUM/ANALYZE",
    "CreateTableAsStmt": "CREATE TABLE AS",
    "PrepareStmt": "PREPARE",
    "ExecuteStmt": "EXECUTE",
}


@dataclass(frozen=True)
class ParsedSelect:
    """A statement that passed the structural checks, with every name it uses. (Those kept
    for repeated SQL, see `_names_cached`, have an empty tree.)"""

    tree: dict[str, Any]
    refs: Refs = field(default_factory=Refs)


def _check_comments(sql: str) -> None:
    try:
        tokens = parser.scan(sql)
    except parser.ParseError:
        return  # the parse below reports it with a position
    for tok in tokens:
        if tok.name in ("SQL_COMMENT", "C_COMMENT"):
            text = sql[tok.start : tok.end + 1]
            found = BLOCKED_KEYWORDS.search(text)
            if found:
                raise WriteOperationDeniedError(
                    f"The keyword {found.group(0).upper()} appears in a comment; comments may "
                    "not contain data-changing or session keywords.",
                    suggestion="Remove the comment (or the keyword in it) and try again.",
                    context={"rule": "keyword_in_comment", "position": tok.start + 1},
                )


def _refuse_long_identifier(sql: str) -> None:
    long = sqltree.long_identifier(sql)
    if long is not None:
        raise InvalidSqlError(
            f"The identifier {long[:80]} is longer than PostgreSQL keeps "
            f"({sqltree.NAME_BYTES} bytes): the guard and the database could read it as "
            "different names.",
            suggestion=f"Write the name as PostgreSQL stores it: its first "
            f"{sqltree.NAME_BYTES} bytes.",
            context={"rule": "long_identifier"},
        )


def parse_select(
    sql: str, *, position_offset: int = 0, strict_comments: bool = True
) -> ParsedSelect:
    """Parse `sql` and allow exactly one SELECT with no writes, INTO or row locks anywhere."""
    if not sql.strip():
        raise InvalidSqlError("The SQL text is empty.", suggestion="Pass a SELECT statement.")
    if "\x00" in sql:
        # PostgreSQL's protocol cannot carry it, and the parser would stop reading there.
        raise InvalidSqlError(
            "The SQL text contains a NUL character.",
            suggestion="Remove the NUL (\\0) character from the query.",
            context={"rule": "nul_character", "position": sql.index("\x00") + 1},
        )
    if strict_comments:
        _check_comments(sql)
    _refuse_long_identifier(sql)
    try:
        tree = sqltree.loads(parser.parse_sql_json(sql))
    except parser.ParseError as exc:
        message, location = (*exc.args, None, None)[:2]
        ctx: dict[str, Any] = {"rule": "syntax"}
        if isinstance(location, int):
            ctx["position"] = max(location - position_offset, 0) + 1
        raise InvalidSqlError(f"Syntax error: {message}", context=ctx) from None
    except sqltree.TooDeepError:
        raise InvalidSqlError(
            "The statement is nested too deeply for the guard to check (hundreds of nested "
            "subqueries, set operations or operators).",
            suggestion="Flatten it: an IN (...) list or a VALUES list instead of a long chain, "
            "fewer UNION arms per call, or a join instead of nested subqueries.",
            context={"rule": "too_deep"},
        ) from None
    stmts = tree.get("stmts", [])
    if not stmts:
        raise InvalidSqlError("The SQL text holds no statement (only comments or semicolons).")
    kinds = [next(iter(s["stmt"])) for s in stmts]
    if len(stmts) > 1:
        cls = (
            InvalidSqlError if all(k == "SelectStmt" for k in kinds) else WriteOperationDeniedError
        )
        raise cls(
            f"{len(stmts)} statements were given; exactly one is allowed per call.",
            suggestion="Send one SELECT per call (no semicolon-separated statements).",
            context={"rule": "single_statement", "statements": [_label(k) for k in kinds]},
        )
    if kinds[0] != "SelectStmt":
        raise WriteOperationDeniedError(
            f"{_label(kinds[0])} statements are not allowed; only SELECT (with WITH, VALUES "
            "or TABLE) is.",
            context={"rule": "select_only", "statement": _label(kinds[0])},
        )
    for key, _ in walk(tree):
        if key in _WRITE_NODES:
            raise WriteOperationDeniedError(
                f"A data-modifying {_WRITE_NODES[key]} inside the query is not allowed.",
                context={"rule": "data_modifying_cte"},
            )
        if key == "intoClause":
            raise WriteOperationDeniedError(
                "SELECT INTO creates a table and is not allowed.",
                suggestion="Drop the INTO clause; results come back to you directly.",
                context={"rule": "select_into"},
            )
        if key == "lockingClause":
            raise WriteOperationDeniedError(
                "Row-locking clauses (FOR UPDATE / FOR SHARE ...) are not allowed.",
                suggestion="Remove the FOR UPDATE/SHARE clause.",
                context={"rule": "locking_clause"},
            )
    return ParsedSelect(tree, refs_of(tree))


@functools.lru_cache(maxsize=256)
def _names_cached(sql: str, strict_comments: bool) -> ParsedSelect:
    """parse_select for repeated SQL, without the tree (which can take megabytes for a long
    select list): the structural verdict depends on the text alone, and the names are checked
    against the current catalog facts on every call. Refusals are not kept: they raise, and
    lru_cache stores only results."""
    return dataclasses.replace(parse_select(sql, strict_comments=strict_comments), tree={})


def _label(kind: str) -> str:
    return _STATEMENT_NAMES.get(kind, kind.removesuffix("Stmt").upper())


def quote_ident(name: str) -> str:
    """Always quote: mixed case, non-ASCII and reserved words all survive."""
    return '"' + name.replace('"', '""') + '"'


class _Qualify(visitors.Visitor):
    def __init__(self, names: tuple[tuple[str, str, str], ...]) -> None:
        super().__init__()
        self.schemas = {(kind, name): schema for kind, name, schema in names}

    def visit_RangeVar(self, ancestors: Any, node: ast.RangeVar) -> None:
        schema = self.schemas.get((RELATION, node.relname or ""))
        if node.schemaname is None and schema is not None:
            node.schemaname = schema

    def visit_TypeName(self, ancestors: Any, node: ast.TypeName) -> None:
        names = node.names or ()
        schema = self.schemas.get((TYPE, names[0].sval)) if len(names) == 1 else None
        if schema is not None:
            node.names = (ast.String(sval=schema), *names)


@functools.lru_cache(maxsize=256)
def qualified_sql(sql: str, names: tuple[tuple[str, str, str], ...]) -> str:
    """`sql` with these relation and type names ((RELATION or TYPE, name, schema)) qualified,
    deparsed from its tree: the names are the statement's own (never a WITH name, see
    closure._Walk.relation_names), so each names the object PostgreSQL would pick on the
    session's path, and the output (column names included) is the same."""
    tree = parse_sql(sql)
    _Qualify(names)(tree)
    text: str = stream.RawStream()(tree)
    return text


def check_where_clause(clause: str, from_sql: str, *, strict_comments: bool = True) -> str:
    """Validate an untrusted WHERE expression; return it, parenthesized, for splicing.

    The clause is probed inside `SELECT 1 FROM <table> WHERE (<clause>\\n)`: the parse must be
    that one plain SELECT, so a clause that closes the parenthesis and goes on (UNION,
    ORDER BY, LIMIT, FOR UPDATE, a second statement) is refused. The newline keeps a trailing
    `--` comment from swallowing the closing parenthesis. What is returned is the expression
    PostgreSQL's parser found, written back from its tree: `a) OR (b` is one expression
    there, `a OR b`, and comes back as `(a OR b)`, so that joined to a condition of ours
    with AND it stays one operand (as the caller's text it would bind as `a OR (b AND ...)`).
    """
    wrapped = f"({clause}\n)"
    prefix = f"SELECT 1 FROM {from_sql} WHERE "
    parsed = parse_select(
        prefix + wrapped, position_offset=len(prefix) + 1, strict_comments=strict_comments
    )
    body = parsed.tree["stmts"][0]["stmt"]["SelectStmt"]
    allowed = {"targetList", "fromClause", "whereClause", "limitOption", "op"}
    extra = sorted(k for k in body if k not in allowed)
    if extra or body.get("op") != "SETOP_NONE" or len(body.get("fromClause", [])) != 1:
        raise WriteOperationDeniedError(
            "where_clause must be a single boolean expression (no UNION, ORDER BY, LIMIT, "
            "GROUP BY or closing parenthesis tricks).",
            suggestion="Pass only the condition, e.g. \"status = 'active' AND id > 10\".",
            context={"rule": "where_clause_shape", "found": extra},
        )
    (probe,) = parse_sql(prefix + wrapped)
    assert isinstance(probe.stmt, ast.SelectStmt) and probe.stmt.whereClause is not None
    return "(" + stream.RawStream()(probe.stmt.whereClause) + ")"


@dataclass
class SqlGuard:
    """The gate every statement passes, before PostgreSQL parses it: structure first (one
    SELECT, no writes, locks or INTO), then every object its names may resolve to and all the
    code those can run (guard/reach.py, guard/rules.py), judged on catalog facts that one
    round trip on the caller's connection confirms are current (guard/state.py)."""

    strict_comments: bool = True
    trusted_roles: tuple[str, ...] = ()
    allow_foreign_tables: bool = False
    allow_open_schema_code: bool = False
    custom: frozenset[str] | None = None  # see rules.Judge.custom
    # The catalog facts as each role a call runs as sees them (None: the login role; a
    # caller's grant may name another, SET LOCAL ROLE, see pool.acting_role): the search path
    # ("$user", and it leaves out schemas the role may not use) and the schemas a role may
    # use (USAGE) are the role's own. One set for every role would be read again whenever a
    # call's role differs from the last one's (CHECK compares the path). Which owners are
    # trusted is the same in each (facts.TRUSTED_ROLES names the session's login role, never
    # the role SET ROLE made current).
    _states: dict[str | None, GuardState] = field(init=False, default_factory=dict)

    @property
    def state(self) -> GuardState:
        """The facts for the role the current block runs as."""
        role = acting_role.get()
        found = self._states.get(role)
        if found is None:
            found = self._states[role] = GuardState(
                tuple(self.trusted_roles),
                self.allow_foreign_tables,
                allow_open_schema_code=self.allow_open_schema_code,
                custom=self.custom,
            )
        return found

    def prelude(self, sql: str) -> Prelude | None:
        """The locks `check` will take for `sql`, when a verified plan says which, to send with
        the transaction's BEGIN (`Database.run(prelude=...)`): one round trip fewer."""
        if len(sql) > _CACHED_SQL_CHARS:
            return None
        try:
            parsed = _names_cached(sql, self.strict_comments)
        except PgMcpError:
            return None  # check() refuses it
        return self.state.prelude(parsed.refs)

    async def check(self, sql: str, conn: asyncpg.Connection, *, position_offset: int = 0) -> str:
        """Refuse `sql` unless it is one SELECT that can run nothing unsafe. `conn` must be in
        the transaction the statement will run in (`Database.run(explicit=True)`): the
        relations the verdict rests on stay locked there until it ends, and the search path
        it was judged on is set there. Returns the statement to run: `sql`, or `sql` with
        relation names qualified where the schema they resolve to is left off that path
        (see closure.run_path)."""
        if position_offset == 0 and len(sql) <= _CACHED_SQL_CHARS:
            parsed = _names_cached(sql, self.strict_comments)
        else:
            parsed = parse_select(
                sql, position_offset=position_offset, strict_comments=self.strict_comments
            )
        plan = await self.state.plan(parsed.refs, conn)
        _refuse(plan)
        return qualified_sql(sql, plan.qualified) if plan.qualified else sql

    async def check_reach(self, sql: str, conn: asyncpg.Connection) -> None:
        """What a statement of any kind reaches, judged (for custom SQL: Judge.custom; a
        custom tool may write): raises as `check` does, InvalidSqlError when the statement
        cannot be read as PostgreSQL reads it. `conn` is in a transaction."""
        _refuse_long_identifier(sql)
        tree = sqltree.parse(sql)
        if tree is None:
            raise InvalidSqlError(
                "The guard cannot parse the statement (or it nests too deeply).",
                context={"rule": "syntax"},
            )
        _refuse(await self.state.plan(refs_of(tree), conn))

    def where_clause(self, clause: str, from_sql: str) -> str:
        return check_where_clause(clause, from_sql, strict_comments=self.strict_comments)


def _refuse(plan: Plan) -> None:
    """Raise the refusal of `plan`, if any."""
    refusal = plan.refusal
    if refusal is None and plan.missing_types:
        refusal = Refusal(
            "unknown_object",
            "uses a type the guard cannot find in the catalog",
            (f"type {min(plan.missing_types)}",),
        )
    if refusal is not None:
        raise WriteOperationDeniedError(
            refusal.message,
            suggestion=refusal.suggestion,
            context={
                "rule": refusal.rule,
                "object": refusal.chain[0],
                "culprit": refusal.chain[-1],
                "via": list(refusal.chain),
            },
        )

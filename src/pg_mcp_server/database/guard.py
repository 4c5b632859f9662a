"""Read-only SQL validation with PostgreSQL's own parser (pglast).

The guard is the friendly first gate: it explains *why* a statement is refused. PostgreSQL is
the backstop (user SQL runs in `BEGIN READ ONLY`, rolled back), but a read-only
transaction still allows side effects such as `pg_read_file`, advisory locks or `set_config`,
so the guard allows exactly one SELECT and only functions that are safe for a reader: stable
or immutable ones (volatility read from `pg_proc`) plus a short list of harmless volatile ones.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import functools
import json
import logging
import re
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from pglast import parser

from pg_mcp_server.database.safety import SafetyCatalog
from pg_mcp_server.database.sqltree import names, walk
from pg_mcp_server.errors import InvalidSqlError, WriteOperationDeniedError

logger = logging.getLogger(__name__)

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
    """A statement that passed the structural checks, with every name the safety check needs.
    (Those kept for repeated SQL, see `_names_cached`, have an empty tree.)"""

    tree: dict[str, Any]
    functions: frozenset[str] = frozenset()
    # `(row).fn` and `row.fn` call fn(row) when no column of that name exists.
    attributes: frozenset[str] = frozenset()
    operators: frozenset[str] = frozenset()
    types: frozenset[str] = frozenset()
    relations: frozenset[str] = frozenset()


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
    try:
        tree = json.loads(parser.parse_sql_json(sql))
    except parser.ParseError as exc:
        message, location = (*exc.args, None, None)[:2]
        ctx: dict[str, Any] = {"rule": "syntax"}
        if isinstance(location, int):
            ctx["position"] = max(location - position_offset, 0) + 1
        raise InvalidSqlError(f"Syntax error: {message}", context=ctx) from None
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
    functions: set[str] = set()
    attributes: set[str] = set()
    operators: set[str] = set()
    types: set[str] = set()
    relations: set[str] = set()
    for key, value in walk(tree):
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
        if not isinstance(value, dict):
            continue
        if key == "FuncCall":
            functions.update(names(value.get("funcname", []))[-1:])
        elif key == "ColumnRef":
            fields = names(value.get("fields", []))
            if len(fields) >= 2:
                attributes.add(fields[-1])
        elif key == "A_Indirection":
            attributes.update(names(value.get("indirection", [])))
        elif key == "A_Expr":
            operators.update(names(value.get("name", []))[-1:])
        elif key in ("TypeName", "typeName"):  # a typed field has no node wrapper
            types.update(names(value.get("names", []))[-1:])
        elif key == "RangeVar":
            relations.add(value.get("relname", ""))
    return ParsedSelect(
        tree,
        frozenset(functions),
        frozenset(attributes),
        frozenset(operators),
        frozenset(types),
        frozenset(relations),
    )


@functools.lru_cache(maxsize=256)
def _names_cached(sql: str, strict_comments: bool) -> ParsedSelect:
    """parse_select for repeated SQL, without the tree (which can take megabytes for a long
    select list): the structural verdict depends on the text alone, and the names are checked
    against the current safety catalog on every call. Refusals are not kept: they raise, and
    lru_cache stores only results."""
    return dataclasses.replace(parse_select(sql, strict_comments=strict_comments), tree={})


def check_safety(parsed: ParsedSelect, catalog: SafetyCatalog) -> None:
    """Refuse names that reach a function a reader must not run (see database/safety.py).
    Names unknown to the catalog pass: PostgreSQL reports them as undefined."""
    found: list[tuple[str, str]] = []
    found += [("function", n) for n in sorted(parsed.functions & catalog.functions)]
    found += [("function", n) for n in sorted(parsed.attributes & catalog.row_functions)]
    found += [("operator", n) for n in sorted(parsed.operators & catalog.operators)]
    found += [("type", n) for n in sorted((parsed.types | parsed.functions) & catalog.types)]
    found += [("relation", n) for n in sorted(parsed.relations & catalog.relations)]
    if not found:
        return
    kind, name = found[0]
    what = {
        "function": f"The function {name}() is not allowed: it can have side effects, read "
        "outside the database or run SQL the guard cannot see.",
        "operator": f"The operator {name} is not allowed: it calls a function with side effects.",
        "type": f"The type {name} is not allowed: its CHECK constraint calls a function with "
        "side effects.",
        "relation": f"Reading {name} is not allowed: its definition (view query or row-level "
        "security policy) calls a function with side effects.",
    }[kind]
    raise WriteOperationDeniedError(
        what,
        suggestion=(
            "Use only side-effect-free functions (stable or immutable ones, plus harmless "
            "volatile ones such as random() or clock_timestamp()) and objects built on them."
        ),
        context={"rule": f"unsafe_{kind}", "names": [n for _, n in found]},
    )


def _label(kind: str) -> str:
    return _STATEMENT_NAMES.get(kind, kind.removesuffix("Stmt").upper())


def quote_ident(name: str) -> str:
    """Always quote: mixed case, non-ASCII and reserved words all survive."""
    return '"' + name.replace('"', '""') + '"'


def check_where_clause(clause: str, from_sql: str, *, strict_comments: bool = True) -> str:
    """Validate an untrusted WHERE expression; return it wrapped for splicing.

    The clause is probed inside `SELECT 1 FROM <table> WHERE (<clause>\\n)`: the parse must be
    that one plain SELECT, so a clause that closes the parenthesis and goes on (UNION,
    ORDER BY, LIMIT, FOR UPDATE, a second statement) is refused. The newline keeps a trailing
    `--` comment from swallowing the closing parenthesis.
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
    return wrapped


@dataclass
class SqlGuard:
    """The gate every statement passes: structure, then names against the safety catalog
    (read from PostgreSQL and cached). The catalog is read on the caller's connection the first
    time, and again whenever a statement calls a function name it has not seen; once it is a
    minute old it is read again in the background, on a connection of its own from `connect`
    (without `connect`, on the caller's), while the current one keeps serving; at two minutes
    (background reads failing) the caller waits for an inline read again."""

    strict_comments: bool = True
    catalog: SafetyCatalog = field(default_factory=SafetyCatalog)
    connect: Callable[[], AbstractAsyncContextManager[asyncpg.Connection]] | None = None
    _refreshing: asyncio.Task[None] | None = field(default=None, init=False, repr=False)

    async def check(self, sql: str, conn: asyncpg.Connection, *, position_offset: int = 0) -> None:
        """Refuse `sql` unless it is one SELECT that calls nothing unsafe (see parse_select
        and check_safety)."""
        if position_offset == 0 and len(sql) <= _CACHED_SQL_CHARS:
            parsed = _names_cached(sql, self.strict_comments)
        else:
            parsed = parse_select(
                sql, position_offset=position_offset, strict_comments=self.strict_comments
            )
        # Inline when it must be (and when background reads have failed for a minute more).
        if (
            self.catalog.unfit(parsed.functions)
            or self.catalog.expired(factor=2)
            or (self.catalog.expired() and self.connect is None)
        ):
            self._install(await SafetyCatalog.read(conn))
        elif self.catalog.expired() and self._refreshing is None:
            # A context of its own: the request that happens to start it must not be able to
            # cancel it (the HTTP gateway cancels what a dropped request was running).
            self._refreshing = asyncio.create_task(self._refresh(), context=contextvars.Context())
        check_safety(parsed, self.catalog)

    def _install(self, catalog: SafetyCatalog) -> None:
        """Keep the newest: a slow background read must not replace a later inline one."""
        if catalog.loaded_at >= self.catalog.loaded_at:
            self.catalog = catalog

    async def _refresh(self) -> None:
        assert self.connect is not None
        try:
            async with self.connect() as conn:
                self._install(await SafetyCatalog.read(conn))
        except Exception:
            logger.warning("refreshing the safety catalog failed; will retry", exc_info=True)
        finally:
            self._refreshing = None

    async def close(self) -> None:
        """Stop a background refresh (before the pool it uses goes away)."""
        task = self._refreshing
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def where_clause(self, clause: str, from_sql: str) -> str:
        return check_where_clause(clause, from_sql, strict_comments=self.strict_comments)

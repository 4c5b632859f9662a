"""Read-only SQL validation with PostgreSQL's own parser (pglast).

The guard is the friendly first gate: it explains *why* a statement is refused. PostgreSQL is
the backstop (every statement runs in `BEGIN READ ONLY`, rolled back), but a read-only
transaction still allows side effects such as `pg_read_file`, advisory locks or `set_config`,
so the guard allows exactly one SELECT and only functions that are safe for a reader: stable
or immutable ones (volatility read from `pg_proc`) plus a short list of harmless volatile ones.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from pglast import parser

from pg_mcp_server.errors import InvalidSqlError, WriteOperationDeniedError

# Volatile, but harmless for a reader (no state outlives the rolled-back transaction, nothing
# outside the database is touched); pg_sleep is bounded by the statement timeout.
HARMLESS_VOLATILE = frozenset(
    {
        "random",
        "random_normal",
        "array_sample",
        "array_shuffle",
        "clock_timestamp",
        "timeofday",
        "gen_random_uuid",
        "uuidv4",
        "uuidv7",
        "uuid_generate_v1",
        "uuid_generate_v1mc",
        "uuid_generate_v4",
        "pg_sleep",
        "pg_sleep_for",
        "pg_sleep_until",
        "pg_total_relation_size",
        "pg_relation_size",
        "pg_table_size",
        "pg_indexes_size",
        "pg_database_size",
        "pg_tablespace_size",
        "pg_partition_tree",
        "pg_partition_ancestors",
        "pg_is_in_recovery",
        "pg_jit_available",
    }
)

# PRD 8.1: these words are refused even inside comments (an agent hiding intent, or a
# prompt-injected comment, is worth a refusal).
BLOCKED_KEYWORDS = re.compile(
    r"\b(INSERT|UPDATE|DELETE|UPSERT|MERGE|CREATE|ALTER|DROP|TRUNCATE|RENAME|GRANT|REVOKE|"
    r"SET|RESET|DISCARD|VACUUM|ANALYZE|CLUSTER|REINDEX|COPY|BEGIN|COMMIT|ROLLBACK|SAVEPOINT)\b",
    re.IGNORECASE,
)

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

_REFRESH_SECONDS = 60.0

FUNCTION_SAFETY_SQL = """
SELECT p.proname AS name,
       bool_and(p.provolatile <> 'v' OR p.proname = ANY($1::text[])) AS safe,
       bool_or(p.pronargs = 1) AS unary
FROM pg_catalog.pg_proc p
GROUP BY p.proname
"""


@dataclass
class FunctionSafety:
    """Which function names a reader may call, read from `pg_proc` and refreshed now and then.

    Overloads share a name; a name is safe only if every function of that name is, since the
    parser cannot tell which overload PostgreSQL will pick.
    """

    safe: dict[str, bool] = field(default_factory=dict)
    unary: frozenset[str] = frozenset()
    loaded_at: float = 0.0

    async def refresh(self, conn: asyncpg.Connection) -> None:
        rows = await conn.fetch(FUNCTION_SAFETY_SQL, sorted(HARMLESS_VOLATILE))
        self.safe = {r["name"]: r["safe"] for r in rows}
        self.unary = frozenset(r["name"] for r in rows if r["unary"])
        self.loaded_at = time.monotonic()

    def stale(self, names: set[str]) -> bool:
        expired = time.monotonic() - self.loaded_at > _REFRESH_SECONDS
        return expired or any(n not in self.safe for n in names)


@dataclass
class ParsedSelect:
    """A statement that passed the structural checks, with what the function check needs."""

    tree: dict[str, Any]
    functions: set[str]
    # Last names of qualified column references: `(row).fn` calls fn(row) when no column of
    # that name exists, so a name that is an unsafe one-argument function is refused too.
    attribute_names: set[str]


def _walk(node: Any) -> Iterator[tuple[str, Any]]:
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                yield key, value
                if isinstance(value, dict | list):
                    stack.append(value)
        elif isinstance(item, list):
            stack.extend(item)


def _names(items: list[dict[str, Any]]) -> list[str]:
    return [i["String"]["sval"] for i in items if "String" in i]


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
    for key, value in _walk(tree):
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
        if key == "FuncCall":
            name = _names(value["funcname"])
            if name:
                functions.add(name[-1])
        elif key == "ColumnRef":
            fields = _names(value["fields"])
            if len(fields) >= 2:
                attributes.add(fields[-1])
    return ParsedSelect(tree=tree, functions=functions, attribute_names=attributes)


def check_functions(parsed: ParsedSelect, safety: FunctionSafety) -> None:
    """Refuse calls to functions a reader must not run (names unknown to pg_proc pass:
    PostgreSQL will report them as undefined)."""
    unsafe = sorted(n for n in parsed.functions if safety.safe.get(n) is False)
    unsafe += sorted(
        n
        for n in parsed.attribute_names
        if n in safety.unary and safety.safe.get(n) is False and n not in unsafe
    )
    if unsafe:
        raise WriteOperationDeniedError(
            f"The function {unsafe[0]}() is not allowed: it can have side effects or read "
            "outside the database.",
            suggestion=(
                "Use only side-effect-free functions (stable or immutable ones, plus harmless "
                "volatile ones such as random() or clock_timestamp())."
            ),
            context={"rule": "unsafe_function", "functions": unsafe},
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
    """The gate every statement passes: structure, then functions (PostgreSQL's volatility,
    cached and refreshed when stale)."""

    strict_comments: bool = True
    safety: FunctionSafety = field(default_factory=FunctionSafety)

    async def check(
        self, sql: str, conn: asyncpg.Connection, *, position_offset: int = 0
    ) -> ParsedSelect:
        parsed = parse_select(
            sql, position_offset=position_offset, strict_comments=self.strict_comments
        )
        if (parsed.functions or parsed.attribute_names) and self.safety.stale(parsed.functions):
            await self.safety.refresh(conn)
        check_functions(parsed, self.safety)
        return parsed

    def where_clause(self, clause: str, from_sql: str) -> str:
        return check_where_clause(clause, from_sql, strict_comments=self.strict_comments)

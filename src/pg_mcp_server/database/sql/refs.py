"""What a raw parse tree names: every catalog object a statement can reach by name.

The guard decides before PostgreSQL sees the statement (parse analysis already runs code: a
literal coerced to a domain checks its constraints), so it cannot know which overload, operator
or cast PostgreSQL will pick. It collects every name instead, with what narrows the candidates
cheaply (a schema, a number of arguments, prefix or infix), and the guard checks every visible
candidate (see database/guard/reach.py). The same reader serves SQL-language function bodies.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pglast import parser

from pg_mcp_server.database.sql import tree as sqltree
from pg_mcp_server.database.sql.tree import names, walk

# A_Expr kinds whose `name` is not the operator PostgreSQL runs.
_BETWEEN = {
    "AEXPR_BETWEEN": ("<=", ">="),
    "AEXPR_BETWEEN_SYM": ("<=", ">="),
    "AEXPR_NOT_BETWEEN": ("<", ">"),
    "AEXPR_NOT_BETWEEN_SYM": ("<", ">"),
}

Name = tuple[str | None, str]  # (schema or None, name)


@dataclass(frozen=True)
class Call:
    """A function call: its name, and its arguments as (argument name, literal text or None
    when the argument is not a literal). Some functions read the object an argument names."""

    schema: str | None
    name: str
    args: tuple[tuple[str | None, str | None], ...]


@dataclass(frozen=True)
class Refs:
    """The names a statement (or a function body) uses, by kind."""

    calls: frozenset[Call] = frozenset()
    # `x.f` and `(x).f` call f(x) when x has no column f: names that may be such functions.
    row_functions: frozenset[str] = frozenset()
    operators: frozenset[tuple[str | None, str, bool]] = frozenset()  # (schema, name, prefix)
    types: frozenset[Name] = frozenset()
    relations: frozenset[Name] = frozenset()
    statements: frozenset[str] = frozenset()  # node names of the top-level statements
    # Every WITH name of the statement. `relations` leaves out the names PostgreSQL resolves
    # to a WITH query (see cte_references); one spelled like a WITH name elsewhere stays.
    ctes: frozenset[str] = frozenset()

    def merged(self, other: Refs) -> Refs:
        return Refs(
            self.calls | other.calls,
            self.row_functions | other.row_functions,
            self.operators | other.operators,
            self.types | other.types,
            self.relations | other.relations,
            self.statements | other.statements,
            self.ctes | other.ctes,
        )


def _qualified(parts: list[str]) -> Name:
    """(schema, name) of a possibly qualified name list (a catalog prefix is PostgreSQL's
    to check: it must be the current database)."""
    return (parts[-2] if len(parts) >= 2 else None, parts[-1])


def literal(node: Any) -> str | None:
    """The text of a string or integer constant, also under casts ('v'::regclass); else None."""
    while isinstance(node, dict) and "TypeCast" in node:
        node = node["TypeCast"].get("arg")
    if not isinstance(node, dict) or "A_Const" not in node:
        return None
    const = node["A_Const"]
    if "sval" in const:
        return str(const["sval"].get("sval", ""))
    if "ival" in const:
        return str(const["ival"].get("ival", 0))
    return None


def _call_args(args: list[Any]) -> tuple[tuple[str | None, str | None], ...]:
    out = []
    for arg in args:
        if isinstance(arg, dict) and "NamedArgExpr" in arg:
            named = arg["NamedArgExpr"]
            out.append((named.get("name"), literal(named.get("arg"))))
        else:
            out.append((None, literal(arg)))
    return tuple(out)


_DYNAMIC = {
    "PLpgSQL_stmt_dynexecute": "EXECUTE",
    "PLpgSQL_stmt_dynfors": "FOR ... IN EXECUTE",
    "PLpgSQL_stmt_return_query": "RETURN QUERY EXECUTE",
    "PLpgSQL_stmt_open": "OPEN ... FOR EXECUTE",
}
_ASSIGNMENT = 3  # parseMode of `target := expression` (PLpgSQL_ASSIGN1..3: 3, 4, 5)


def _as_select(query: str, mode: int) -> str:
    """A PL/pgSQL expression or assignment as a statement pglast can parse: `target :=
    expression` becomes `SELECT target, (expression)` (a subscript in the target runs too)."""
    if mode < _ASSIGNMENT:
        return f"SELECT {query}"
    depth = 0
    for tok in parser.scan(query):
        text = query[tok.start : tok.end + 1]
        depth += text in ("(", "[") or -(text in (")", "]"))
        if depth == 0 and text in (":=", "="):
            return f"SELECT {query[: tok.start]}, ({query[tok.end + 1 :]}\n)"
    return f"SELECT {query}"


def plpgsql_refs(create_function: str) -> Refs | str:
    """The names a PL/pgSQL function's static SQL uses (`create_function` is its whole
    CREATE FUNCTION statement), or why they cannot be known."""
    try:
        tree = json.loads(parser.parse_plpgsql_json(create_function))
    except (parser.ParseError, RecursionError):
        return "has a PL/pgSQL body the guard cannot parse"
    refs = Refs(statements=frozenset({"SelectStmt"}))
    for key, value in walk(tree):
        dynamic = key in _DYNAMIC and (
            key.endswith(("dynexecute", "dynfors")) or "dynquery" in value
        )
        if dynamic:
            return f"runs SQL built at run time ({_DYNAMIC[key]}), which the guard cannot see"
        if key != "PLpgSQL_expr" or not isinstance(value, dict):
            continue
        mode = value.get("parseMode", 0)
        query = value.get("query", "")
        try:
            statement = sqltree.loads(
                parser.parse_sql_json(query if mode == 0 else _as_select(query, mode))
            )
        except (parser.ParseError, sqltree.TooDeepError):
            return "has a PL/pgSQL statement the guard cannot parse"
        refs = refs.merged(refs_of(statement))
    return refs


_WRITES = frozenset({"InsertStmt", "UpdateStmt", "DeleteStmt", "MergeStmt"})


def select_refs(sql: str) -> Refs | str:
    """The names in SQL text a function will run (crosstab's), or why it is not plain reading:
    one or more SELECTs, without data-modifying parts, INTO or row locks."""
    tree = sqltree.parse(sql)
    if tree is None:
        return "is not SQL the guard can parse"
    if sqltree.long_identifier(sql) is not None:
        return f"names an identifier longer than PostgreSQL keeps ({sqltree.NAME_BYTES} bytes)"
    refs = refs_of(tree)
    if refs.statements != {"SelectStmt"}:
        return "is not a SELECT"
    for key, _ in walk(tree):
        if key in _WRITES or key in ("intoClause", "lockingClause"):
            return "writes, locks rows or creates a table"
    return refs


_DATA_MODIFYING = frozenset({"InsertStmt", "UpdateStmt", "DeleteStmt", "MergeStmt"})


def cte_references(tree: Any) -> set[int]:
    """The RangeVar nodes (by id) of a parsed statement list that PostgreSQL resolves to a
    WITH query rather than to a relation, by its scope rules (parse_relation.c,
    scanNameSpaceForCTE; parse_cte.c, transformWithClause): an unqualified FROM item whose
    name a WITH of its own query level or of an enclosing one has. A WITH is analysed before
    the rest of its query level, and its queries see the earlier ones of the same WITH, or,
    when it is RECURSIVE, all of them (themselves too). A name of the same spelling anywhere
    else (a sibling subquery or set-operation arm, an earlier query of the WITH, the WITH
    query's own body when not recursive) is a relation. Data-modifying statements are not
    followed (their target is a relation even where a WITH name matches): every name in
    them stays a relation, which can only make the guard judge more than PostgreSQL reads."""
    found: set[int] = set()
    # (node, WITH names in scope, what the node is); iterative: trees nest as deep as the
    # JSON decoder allows (a UNION of hundreds of arms nests its `larg`s as deep).
    stack: list[tuple[Any, frozenset[str], str]] = [(tree, frozenset(), _ANY)]
    while stack:
        node, scope, role = stack.pop()
        if isinstance(node, list):
            stack.extend((item, scope, role) for item in node)
        elif not isinstance(node, dict):
            continue
        elif role == _SELECT:
            _select_parts(node, scope, stack)
        elif (
            role == _FROM and len(node) == 1 and isinstance(body := next(iter(node.values())), dict)
        ):
            kind = next(iter(node))
            if kind == "RangeVar":
                if body.get("schemaname") is None and body.get("relname") in scope:
                    found.add(id(body))
            elif kind in _FROM_ITEMS:  # each joined item, a sampled relation: FROM items too
                for key, value in body.items():
                    stack.append((value, scope, _FROM if key in _FROM_ITEMS[kind] else _ANY))
            else:
                stack.append((node, scope, _ANY))
        else:
            for key, value in node.items():
                if key == "SelectStmt":
                    stack.append((value, scope, _SELECT))
                elif key not in _DATA_MODIFYING:
                    stack.append((value, scope, _ANY))
    return found


_ANY, _FROM, _SELECT = "any", "from", "select"
_FROM_ITEMS = {"JoinExpr": ("larg", "rarg"), "RangeTableSample": ("relation",)}


def _select_parts(
    select: dict[str, Any], scope: frozenset[str], stack: list[tuple[Any, frozenset[str], str]]
) -> None:
    """Push a SelectStmt's parts, each with the WITH names it sees."""
    with_clause = select.get("withClause") or {}
    ctes = [c.get("CommonTableExpr", {}) for c in with_clause.get("ctes", [])]
    if with_clause.get("recursive"):
        scope = scope | {c.get("ctename", "") for c in ctes}
        stack.extend((c.get("ctequery"), scope, _ANY) for c in ctes)
    else:
        for cte in ctes:
            stack.append((cte.get("ctequery"), scope, _ANY))
            scope = scope | {cte.get("ctename", "")}
    for key, value in select.items():
        if key in ("larg", "rarg"):  # a set operation's arms: SelectStmts, unwrapped
            stack.append((value, scope, _SELECT))
        elif key == "fromClause":
            stack.append((value, scope, _FROM))
        elif key != "withClause":
            stack.append((value, scope, _ANY))


def refs_of(tree: dict[str, Any]) -> Refs:
    """Every name in a parsed statement list (pglast JSON), by kind; a FROM item that
    PostgreSQL resolves to a WITH query is not a relation (see cte_references)."""
    to_ctes = cte_references(tree)
    calls: set[Call] = set()
    row_functions: set[str] = set()
    operators: set[tuple[str | None, str, bool]] = set()
    types: set[Name] = set()
    relations: set[Name] = set()
    ctes: set[str] = set()

    def operator(parts: list[str], prefix: bool) -> None:
        if parts:
            schema, name = _qualified(parts)
            operators.add((schema, name, prefix))

    for key, value in walk(tree):
        if not isinstance(value, dict):
            continue
        if key == "FuncCall":
            parts = names(value.get("funcname", []))
            if not parts:
                continue
            schema, name = _qualified(parts)
            calls.add(Call(schema, name, _call_args(value.get("args", []))))
        elif key == "A_Expr":
            kind = value.get("kind", "")
            if kind in _BETWEEN:
                for op in _BETWEEN[kind]:
                    operators.add((None, op, False))
            else:
                operator(names(value.get("name", [])), "lexpr" not in value)
        elif key == "SubLink":
            if value.get("subLinkType") in ("ANY_SUBLINK", "ALL_SUBLINK", "ROWCOMPARE_SUBLINK"):
                operator(names(value.get("operName", [])) or ["="], False)
        elif key == "CaseExpr" and "arg" in value:
            operators.add((None, "=", False))
        elif key == "JoinExpr" and (value.get("usingClause") or value.get("isNatural")):
            # PostgreSQL compares the joined columns with `=`, looked up where no name is
            # written (attack5 F3: a body on a path with an open schema ran a planted one).
            operators.add((None, "=", False))
        elif key == "SortBy" and "useOp" in value:
            operator(names(value["useOp"]), False)
        elif key in ("TypeName", "typeName"):  # a typed field has no node wrapper
            parts = names(value.get("names", []))
            if parts:
                types.add(_qualified(parts))
        elif key == "RangeVar" and id(value) not in to_ctes:
            relations.add((value.get("schemaname"), value.get("relname", "")))
        elif key == "CommonTableExpr":
            ctes.add(value.get("ctename", ""))
        elif key == "RangeTableSample":
            parts = names(value.get("method", []))
            if parts:
                schema, name = _qualified(parts)
                calls.add(Call(schema, name, ((None, None),)))  # the method's handler
        elif key == "ColumnRef":
            row_functions.update(names(value.get("fields", []))[1:])
        elif key == "A_Indirection":
            row_functions.update(names(value.get("indirection", [])))
    statements = frozenset(next(iter(s["stmt"])) for s in tree.get("stmts", []) if s.get("stmt"))
    return Refs(
        frozenset(calls),
        frozenset(row_functions),
        frozenset(operators),
        frozenset(types),
        frozenset(relations),
        statements,
        frozenset(ctes),
    )

"""Our own SQL, pinned to pg_catalog: nothing planted on the search path can take it over.

A role that may create objects in a schema on the server's search path (often `public`) can
plant an operator or function whose argument types match exactly where a statement relies on
an implicit cast (`reltuples >= 0` is real against integer; the built-in is `>=(real, real)`).
PostgreSQL prefers such an exact match in any schema over a built-in that needs a cast
(CVE-2018-1058), so the planted function would run as the server's role. Every statement the
server sends of its own therefore goes through `pin`, which rewrites its parse tree so that
each function, operator, type and collation it names is looked up in pg_catalog only:

- `f(x)` becomes `pg_catalog.f(x)`, `x::text` becomes `x::pg_catalog.text`;
- `a >= b`, `a = ANY (b)`, `a || b` and `a IN (SELECT ...)` get `OPERATOR(pg_catalog.>=)`...;
- constructs that look an operator up by a name SQL cannot qualify are spelled out:
  `LIKE` is `~~`, `x IN (a, b)` is `x = a OR x = b`, `x BETWEEN a AND b` is `x >= a AND
  x <= b`, `CASE x WHEN a` is `CASE WHEN x = a`, `NULLIF(x, a)` and `x IS DISTINCT FROM a`
  are CASEs (each with the operator pinned). Those repeat `x`, so `x` must be a column, a
  parameter or a constant; anything else, and `JOIN ... USING`, NATURAL joins and `ORDER BY
  ... USING`, is refused with the spelling to use instead.

The rewritten tree is deparsed, and the text parsed again must give the same tree with nothing
left unpinned (`unpinned`), or `pin` raises. That takes milliseconds to tens of milliseconds a
statement (pglast's parse trees and printer are Python), a few hundred in all, so it is never
done while the server runs. Each statement of ours is written once, as SQL reads best, in the
module that sends it, and registered there under a name: `NAME = statement("part.NAME", sql)`.
`python -m pg_mcp_server.database.sql.pinned --write` pins every registered statement and
writes the text into the checked-in file pinned_sql.json, keyed by name, with a digest of the
SQL as written; `statement` returns that text, so what the server sends is a whole constant,
generated when the statement was written, and a reviewer reads both the SQL as written (next
to the code that uses it) and exactly what goes to PostgreSQL (pinned_sql.json, in the diff,
a line of about 80 characters each). Why generate rather than write the pinned text by hand:
the pinned text spells out what SQL says shortly (`OPERATOR(pg_catalog.>=)`, IN lists and
BETWEEN as comparisons, a CASE for NULLIF), which is where a hand-made slip would hide; the
generator cannot slip, and tests/test_pinned.py fails when pinned_sql.json is not what `pin`
makes of the SQL as written (`--check` says the same). Should the SQL as written change
without `--write`, `statement` pins it at import instead (slow, never wrong) and the test
fails. The generated text is data, not code (JSON): whole statements repeat the parts they
share (a relation's row facts, its foreign keys), which is the point of sending them whole,
and nobody edits them.
Identifiers of tables and columns are left alone: our statements name relations with their
schema, and a column cannot be planted.

SQL we did not write (custom definitions) goes through `qualify` instead: it names, with the
schema PostgreSQL resolved them to, only the names that live outside pg_catalog, and runs
under `search_path = pg_catalog, pg_temp`, where every other name can only be pg_catalog's
(see custom/resolve.py); the constructs pin() must spell out stay as written.

Its size (~500 lines): `pin` must know every construct whose operator SQL cannot qualify;
the statement registry and the generator of pinned_sql.json sit with it.
"""

from __future__ import annotations

import argparse
import copy
import functools
import hashlib
import importlib
import json
import logging
import pkgutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from pglast import ast, enums, parse_sql
from pglast.parser import ParseError
from pglast.stream import RawStream

logger = logging.getLogger(__name__)

CATALOG = "pg_catalog"
_K = enums.A_Expr_Kind
_PINNED_KINDS = {_K.AEXPR_OP, _K.AEXPR_OP_ANY, _K.AEXPR_OP_ALL}
# LIKE and its kin are plain operators once written with their names.
_PATTERN_KINDS = {_K.AEXPR_LIKE, _K.AEXPR_ILIKE, _K.AEXPR_SIMILAR}
# What may be repeated when a construct is spelled out.
_SIMPLE = (ast.ColumnRef, ast.ParamRef, ast.A_Const)


class UnpinnableSqlError(ValueError):
    """A statement of ours uses a construct `pin` cannot pin; the message says what to write."""


@functools.cache
def pin(sql: str, *, qualified: bool = False) -> str:
    """`sql` (one or more statements) with every function, operator, type and collation
    looked up in pg_catalog whatever the search path holds. Cached: call it where the
    statement is sent. `qualified`: names already qualified with another schema count as
    pinned (custom SQL, once `qualify` has named their schemas); ours use pg_catalog only."""
    tree = parse_sql(sql)
    for raw in tree:
        raw.stmt = _pin(raw.stmt)
    text: str = RawStream()(tree)
    again = parse_sql(text)
    if not _same(again, tree):
        raise UnpinnableSqlError(f"pglast does not deparse the pinned statement faithfully: {text}")
    left = _left(again, qualified)
    if left:
        raise UnpinnableSqlError(f"left unpinned: {', '.join(left)}")
    return text


# The statements of ours, by name, as written: filled as the modules that send them are
# imported (each registers its own at import, like a decorator), read by --write and the tests.
_WRITTEN: dict[str, str] = {}
PINNED_FILE = Path(__file__).with_name("pinned_sql.json")


@functools.cache
def generated() -> dict[str, tuple[str, str]]:
    """pinned_sql.json as checked in: name -> (digest of the SQL as written, pinned text)."""
    entries = json.loads(PINNED_FILE.read_text())
    return {name: (e["digest"], "".join(e["pinned"])) for name, e in entries.items()}


def statement(name: str, sql: str) -> str:
    """Register `sql`, a statement of ours (one or more, constant: vary it with parameters),
    under `name` ("part.module.CONSTANT"), and return the text to send: its pinned form,
    generated into pinned_sql.json. If the SQL as written is not what that text was made
    from, it is pinned here, once (slow at import, never wrong; tests/test_pinned.py fails)."""
    if _WRITTEN.setdefault(name, sql) != sql:
        raise ValueError(f"two statements of ours are named {name}")
    digest, text = generated().get(name, ("", ""))
    if digest == _digest(sql):
        return text
    logger.warning("statement %s changed since pinned_sql.json was generated: pinning it", name)
    return pin(sql)


def statements() -> dict[str, str]:
    """Every statement of ours, name -> SQL as written: each module of the server imported
    first, so that none that registers one is missed."""
    package = importlib.import_module("pg_mcp_server")
    for module in pkgutil.walk_packages(package.__path__, "pg_mcp_server."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    return dict(sorted(_WRITTEN.items()))


def _digest(sql: str) -> str:
    return hashlib.sha256(sql.encode()).hexdigest()[:16]


def generate() -> str:
    """pinned_sql.json's text: each statement of ours, pinned, with the digest of what it
    was written as; the text in pieces of a line each (cut after spaces), joined on reading."""
    entries = {
        name: {"digest": _digest(sql), "pinned": _pieces(pin(sql), 80)}
        for name, sql in statements().items()
    }
    return json.dumps(entries, indent=1, ensure_ascii=False) + "\n"


def _pieces(text: str, width: int) -> list[str]:
    """`text` cut after spaces (or brackets) into pieces of at most `width` characters."""
    pieces: list[str] = []
    while len(text) > width:
        cut = text.rfind(" ", 0, width) + 1 or text.rfind("(", 0, width) + 1 or width
        pieces.append(text[:cut])
        text = text[cut:]
    return [*pieces, text] if text else pieces


def main(argv: list[str] | None = None) -> int:
    """--write: (re)generate pinned_sql.json; --check: exit 1 if it is not what --write makes."""
    parser = argparse.ArgumentParser(prog="python -m pg_mcp_server.database.sql.pinned")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--check", action="store_true", help="exit 1 if pinned_sql.json is stale")
    action.add_argument("--write", action="store_true", help="regenerate pinned_sql.json")
    write = parser.parse_args(argv).write
    text = generate()
    if write:
        PINNED_FILE.write_text(text)
        return 0
    if PINNED_FILE.read_text() == text:
        return 0
    print(f"{PINNED_FILE} is stale: run {parser.prog} --write", file=sys.stderr)
    return 1


def pin_tree(node: Any) -> Any:
    """`node`, a parse tree of ours built at run time, pinned like `pin`'s statements (changed
    in place, or replaced: use what it returns). Only the part that is ours: graft a caller's
    statement in afterwards, or its names would be pinned too. Nothing checks the printed
    text here: the tests run the constructs it builds (test_pinned_traps)."""
    return _pin(node)


Kind = Literal["function", "operator", "type", "relation"]


def qualify(sql: str, schema_of: Callable[[Kind, str], str | None]) -> str:
    """`sql` (one statement) with each unqualified function, operator, type and relation name
    qualified with the schema `schema_of(kind, name)` gives (None: left as written). A name
    that refers to a CTE of the statement is never asked about. Operators are qualified
    where SQL can write them qualified (`a OPERATOR(s.=) b`, `= ANY`, `IN (SELECT ...)`);
    the other constructs keep their unqualified operator. The printed text must parse back
    to the same tree, or UnpinnableSqlError."""
    tree = parse_sql(sql)
    ctes = {str(node.ctename) for node in _nodes(tree) if isinstance(node, ast.CommonTableExpr)}

    def qualified(
        kind: Kind, name: tuple[ast.String, ...] | None, default: str | None = None
    ) -> tuple[ast.String, ...] | None:
        if name is not None and len(name) != 1:
            return name  # written qualified: the operator's choice
        last = name[0].sval if name else default
        schema = schema_of(kind, last) if last else None
        return name if schema is None else (ast.String(schema), ast.String(last))

    for node in _nodes(tree):
        if isinstance(node, ast.FuncCall):
            node.funcname = qualified("function", node.funcname)
        elif isinstance(node, ast.TypeName):
            node.names = qualified("type", node.names)
        elif isinstance(node, ast.A_Expr) and node.kind in _PINNED_KINDS:
            node.name = qualified("operator", node.name)
        elif isinstance(node, ast.SubLink) and node.subLinkType in _ANY_ALL:
            node.operName = qualified("operator", node.operName, "=") or node.operName
        elif (
            isinstance(node, ast.RangeVar)
            and node.schemaname is None
            and node.relname not in ctes
            and (schema := schema_of("relation", str(node.relname))) is not None
        ):
            node.schemaname = schema
    text: str = RawStream()(tree)
    if not _same(parse_sql(text), tree):
        raise UnpinnableSqlError(f"pglast does not print the qualified statement back: {text}")
    return text


def written_qualified(sql: str) -> set[tuple[Kind, str, str]]:
    """(kind, schema, name) of each function, operator, type and relation `sql` names
    qualified (the schemas its writer chose)."""
    out: set[tuple[Kind, str, str]] = set()

    def add(kind: Kind, name: tuple[ast.String, ...] | None) -> None:
        if name is not None and len(name) == 2:
            out.add((kind, str(name[0].sval), str(name[1].sval)))

    for node in _nodes(parse_sql(sql)):
        if isinstance(node, ast.FuncCall):
            add("function", node.funcname)
        elif isinstance(node, ast.TypeName):
            add("type", node.names)
        elif isinstance(node, ast.A_Expr):
            add("operator", node.name)
        elif isinstance(node, ast.SubLink):
            add("operator", node.operName)
        elif isinstance(node, ast.RangeVar) and node.schemaname is not None:
            out.add(("relation", str(node.schemaname), str(node.relname)))
    return out


def unqualified_names(sql: str) -> set[tuple[Kind, str]]:
    """(kind, name) of each function, operator, type and relation `sql` names unqualified
    (a CTE's name aside): what `qualify` asks about."""
    out: set[tuple[Kind, str]] = set()

    def ask(kind: Kind, name: str) -> None:
        out.add((kind, name))

    qualify(sql, lambda kind, name: ask(kind, name))
    return out


def _same(a: Any, b: Any) -> bool:
    """Equal trees, but for positions in the text, fields left at their defaults (a node
    built here has None where the parser writes False or 0), and whether a call was written
    as SQL syntax (`x AT TIME ZONE 'UTC'` comes back as `pg_catalog.timezone('UTC', x)`)."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, ast.Node) and isinstance(b, ast.Node):
        return type(a) is type(b) and all(
            _same(getattr(a, m), getattr(b, m))
            for m in {*a, *b}
            if m not in ("location", "funcformat")
            and not m.endswith(("_location", "_len", "_start", "_end"))
        )
    return a == b or (not a and not b)


def unpinned(sql: str) -> list[str]:
    """What in `sql` PostgreSQL would look up on the search path (empty when pinned)."""
    try:
        tree = parse_sql(sql)
    except ParseError as exc:
        raise UnpinnableSqlError(f"does not parse ({exc}): {sql[:200]}") from None
    return _left(tree)


def _left(tree: Any, qualified: bool = False) -> list[str]:
    return sorted({found for node in _nodes(tree) if (found := _unpinned(node, qualified))})


def _nodes(node: Any) -> Iterator[ast.Node]:
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, tuple):
            stack.extend(item)
        elif isinstance(item, ast.Node):
            yield item
            stack.extend(getattr(item, member) for member in item)


_ANY_ALL = (
    enums.SubLinkType.ANY_SUBLINK,
    enums.SubLinkType.ALL_SUBLINK,
    enums.SubLinkType.ROWCOMPARE_SUBLINK,
)


def _unpinned(node: ast.Node, qualified: bool = False) -> str | None:
    """What `node` has PostgreSQL look up by name on the search path, if anything
    (`qualified`: a name qualified with any schema is not)."""

    def _ours(name: tuple[ast.String, ...] | None) -> bool:
        return name is not None and len(name) == 2 and (qualified or name[0].sval == CATALOG)

    if isinstance(node, ast.FuncCall) and not _ours(node.funcname):
        return f"function {_dotted(node.funcname)}"
    if isinstance(node, ast.TypeName) and not _ours(node.names):
        return f"type {_dotted(node.names)}"
    if isinstance(node, ast.CollateClause) and not _ours(node.collname):
        return f"collation {_dotted(node.collname)}"
    if isinstance(node, ast.A_Expr):
        if node.kind not in _PINNED_KINDS:
            return f"{getattr(node.kind, 'name', node.kind)} ({_dotted(node.name)})"
        return None if _ours(node.name) else f"operator {_dotted(node.name)}"
    if isinstance(node, ast.SubLink) and node.subLinkType in _ANY_ALL:
        return None if _ours(node.operName) else f"operator {_dotted(node.operName) or '='}"
    if isinstance(node, ast.CaseExpr) and node.arg is not None:
        return "CASE x WHEN (operator =)"
    if isinstance(node, ast.JoinExpr) and (node.usingClause or node.isNatural):
        return "JOIN USING or NATURAL JOIN (operator =)"
    if isinstance(node, ast.SortBy) and node.useOp:
        return f"ORDER BY USING (operator {_dotted(node.useOp)})"
    if isinstance(node, ast.RangeTableSample) and not _ours(node.method):
        return f"tablesample method {_dotted(node.method)}"
    return None


def _dotted(name: tuple[ast.String, ...] | None) -> str:
    return ".".join(part.sval or "" for part in name or ())


# --- the rewrite ------------------------------------------------------------------------------


def _pin(node: Any) -> Any:
    """`node` with its subtree pinned (nodes changed in place, or replaced)."""
    if isinstance(node, tuple):
        return tuple(_pin(n) for n in node)
    if not isinstance(node, ast.Node):
        return node
    for member in node:
        value = getattr(node, member)
        if isinstance(value, tuple | ast.Node):
            setattr(node, member, _pin(value))
    return _rewrite(node)


def _name(
    name: tuple[ast.String, ...] | None, default: str | None = None
) -> tuple[ast.String, ...]:
    """An operator, function, type or collation name, qualified with pg_catalog."""
    if not name:
        assert default is not None
        name = (ast.String(default),)
    if len(name) == 1:
        return (ast.String(CATALOG), *name)
    return name


def _op(op: str, left: Any, right: Any) -> ast.A_Expr:
    return ast.A_Expr(kind=_K.AEXPR_OP, name=_name((ast.String(op),)), lexpr=left, rexpr=right)


def _bool(kind: enums.BoolExprType, args: list[Any]) -> Any:
    return args[0] if len(args) == 1 else ast.BoolExpr(boolop=kind, args=tuple(args))


def _simple(node: Any, construct: str, instead: str) -> Any:
    """`node`, which a spelled-out `construct` repeats: only a column, parameter or constant
    (possibly cast) may be repeated without being evaluated twice."""
    inner = node.arg if isinstance(node, ast.TypeCast) else node
    if not isinstance(inner, _SIMPLE):
        raise UnpinnableSqlError(f"{construct} on an expression: write {instead}")
    return node


def _true(value: bool) -> ast.A_Const:
    return ast.A_Const(val=ast.Boolean(value))


def _case(whens: list[tuple[Any, Any]], default: Any) -> ast.CaseExpr:
    return ast.CaseExpr(
        args=tuple(ast.CaseWhen(expr=cond, result=result) for cond, result in whens),
        defresult=default,
    )


def _rewrite(node: ast.Node) -> Any:
    if isinstance(node, ast.FuncCall):
        node.funcname = _name(node.funcname)
    elif isinstance(node, ast.TypeName):
        node.names = _name(node.names)
    elif isinstance(node, ast.CollateClause):
        node.collname = _name(node.collname)
    elif isinstance(node, ast.SubLink) and node.subLinkType in (
        enums.SubLinkType.ANY_SUBLINK,
        enums.SubLinkType.ALL_SUBLINK,
        enums.SubLinkType.ROWCOMPARE_SUBLINK,
    ):
        node.operName = _name(node.operName, "=")
    elif isinstance(node, ast.A_Expr):
        return _a_expr(node)
    elif isinstance(node, ast.BoolExpr) and node.boolop != enums.BoolExprType.NOT_EXPR:
        # `a OR (x = 1 OR x = 2)` from an IN list: one OR, as the text reads back
        node.args = tuple(
            item
            for arg in node.args or ()
            for item in (
                (arg.args or ())
                if isinstance(arg, ast.BoolExpr) and arg.boolop == node.boolop
                else (arg,)
            )
        )
    elif isinstance(node, ast.CaseExpr) and node.arg is not None:
        arg = _simple(node.arg, "CASE x WHEN", "CASE WHEN x = ...")
        whens = [(_op("=", copy.deepcopy(arg), w.expr), w.result) for w in node.args or ()]
        return _case(whens, node.defresult)
    elif isinstance(node, ast.JoinExpr) and (node.usingClause or node.isNatural):
        raise UnpinnableSqlError("JOIN ... USING and NATURAL JOIN: write JOIN ... ON a.x = b.x")
    elif isinstance(node, ast.SortBy) and node.useOp:
        raise UnpinnableSqlError("ORDER BY ... USING: sort by the type's own order")
    elif isinstance(node, ast.RangeTableSample):
        raise UnpinnableSqlError("TABLESAMPLE: pglast does not deparse pg_catalog.system")
    return node


def _a_expr(node: ast.A_Expr) -> Any:
    kind = node.kind
    op = node.name[-1].sval if node.name else "="
    left: Any = node.lexpr
    right: Any = node.rexpr
    items: tuple[Any, ...] = right if isinstance(right, tuple) else ()
    if kind in _PINNED_KINDS or kind in _PATTERN_KINDS:
        node.kind = _K.AEXPR_OP if kind in _PATTERN_KINDS else kind
        node.name = _name(node.name)
        return node
    if kind == _K.AEXPR_IN:
        _simple(left, "IN (...)", "x = ANY (ARRAY[...])")
        if op == "=":  # x = a OR x = b, as PostgreSQL reads it
            return _bool(
                enums.BoolExprType.OR_EXPR, [_op("=", copy.deepcopy(left), v) for v in items]
            )
        return _bool(  # NOT IN: x <> a AND x <> b
            enums.BoolExprType.AND_EXPR, [_op("<>", copy.deepcopy(left), v) for v in items]
        )
    if kind in (_K.AEXPR_BETWEEN, _K.AEXPR_NOT_BETWEEN):
        _simple(left, "BETWEEN", "x >= a AND x <= b")
        low, high = items
        if kind == _K.AEXPR_BETWEEN:
            return _bool(
                enums.BoolExprType.AND_EXPR,
                [_op(">=", left, low), _op("<=", copy.deepcopy(left), high)],
            )
        return _bool(
            enums.BoolExprType.OR_EXPR,
            [_op("<", left, low), _op(">", copy.deepcopy(left), high)],
        )
    if kind == _K.AEXPR_NULLIF:
        _simple(left, "NULLIF", "CASE WHEN x = a THEN NULL ELSE x END")
        null = ast.A_Const(isnull=True)
        return _case([(_op("=", left, right), null)], copy.deepcopy(left))
    if kind in (_K.AEXPR_DISTINCT, _K.AEXPR_NOT_DISTINCT):
        # CASE WHEN x = y THEN <not distinct> WHEN x IS NULL THEN y IS [NOT] NULL ELSE
        # <distinct> END: the comparison first, so that a parameter gets its type from it
        # (`$1 IS NULL` first would leave it undetermined).
        _simple(left, "IS DISTINCT FROM", "a CASE over = and IS NULL")
        _simple(right, "IS DISTINCT FROM", "a CASE over = and IS NULL")
        distinct = kind == _K.AEXPR_DISTINCT
        test = enums.NullTestType.IS_NOT_NULL if distinct else enums.NullTestType.IS_NULL
        return _case(
            [
                (_op("=", left, right), _true(not distinct)),
                (
                    ast.NullTest(arg=copy.deepcopy(left), nulltesttype=enums.NullTestType.IS_NULL),
                    ast.NullTest(arg=copy.deepcopy(right), nulltesttype=test),
                ),
            ],
            _true(distinct),
        )
    raise UnpinnableSqlError(f"{kind}: write it with plain comparisons")


if __name__ == "__main__":
    # Run as a script this file is __main__, not the module the statements register with.
    from pg_mcp_server.database.sql import pinned as _registry

    sys.exit(_registry.main())

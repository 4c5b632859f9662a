"""The statement that reads a caller's rows, built in the parse tree (pglast), never by string.

A caller's SELECT (already passed by the guard) runs inside this wrapper, so that PostgreSQL
itself does the work a tool would otherwise do row by row in Python, and nothing unbounded
ever crosses the wire:

```
SELECT count(*), count(*) FILTER (WHERE kept), string_agg(r, ',' ORDER BY n) FILTER (...),
       array_agg(r ORDER BY n) FILTER (...), <one typed NULL per column>   -- 4. one row back
FROM (SELECT r, row_number() OVER w AS n, sum(octet_length(r) + 1) OVER w AS size
      FROM (SELECT '[' || <each column as JSON> || ']' AS r, <sort keys>
            FROM (<the caller's SELECT, + sort keys, + sentinel>) AS s(c1, .., cN, k.., end)
            WHERE s.end ORDER BY <sort keys> LIMIT limit + 1) AS m     -- 2. at most limit + 1
      WINDOW w AS (ORDER BY <sort keys> ROWS UNBOUNDED PRECEDING)) AS w   -- 3. running size
```

1. Each row becomes one JSON array text made by PostgreSQL (`to_json` of every value): every
   type it can return has a JSON form there (records and composites as objects, ranges, hstore
   or PostGIS through their own casts, anything else as its text form), and the server does not
   decode and re-encode values one by one.
2. The row limit reaches the planner: the caller's statement gets `LIMIT limit + 1` where that
   does not change its meaning, and the middle level's `ORDER BY .. LIMIT` bounds it anyway at
   run time (PostgreSQL passes the bound down into a Sort as a top-N heapsort).
3. Rows are kept while their running size fits `max_bytes`, so PostgreSQL never sends more than
   the byte cap, however wide a value is (nothing relies on a subquery's row order: every level
   orders by the caller's own sort keys, carried up as hidden columns).
4. One row comes back: the rows read (<= limit + 1, so `has_more` is exact), the rows kept, the
   JSON of those that fit the first page (`page_bytes`: one string, as a one-page answer sends
   it), the JSON of each further row (`rest`, an array: the pages are cut from it in Python, so
   the result is read once, from one statement and one snapshot; NULL when all fit the first
   page, which then costs nothing more), and one typed NULL per column (of its type, or its
   element type for an array: the driver then needs no look-up of array types, whose query a
   function shadowed on the search path could break), which makes PostgreSQL refuse the
   prepared wrapper ("cached plan must not change result type") when a column's type changes
   under it; a changed column count trips the sentinel (an ambiguous `__pgmcp_end`) or the
   alias list (too long).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pglast import ast, enums, parse_sql, stream

from pg_mcp_server.database.sql import pin_tree
from pg_mcp_server.errors import InvalidSqlError

SENTINEL = "__pgmcp_end"
_KEY = "__pgmcp_k{}"


@dataclass(frozen=True)
class SortKey:
    """One ORDER BY item of the caller's statement, as the wrapper sees it: an output column
    (`position`, 1-based) or a hidden column of its own (`hidden`, the expression)."""

    clause: ast.SortBy
    position: int | None = None
    hidden: ast.Node | None = None


def parse(sql: str) -> ast.SelectStmt:
    """The one SELECT of `sql` (the guard has already refused anything else)."""
    stmts = parse_sql(sql)
    if len(stmts) != 1 or not isinstance(stmts[0].stmt, ast.SelectStmt):
        raise InvalidSqlError("Only a single SELECT statement can run here.")
    stmt = stmts[0].stmt
    assert isinstance(stmt, ast.SelectStmt)
    return stmt


def deparse(node: Any) -> str:
    text: str = stream.RawStream()(node)
    return text


def _same(a: ast.Node, b: ast.Node) -> bool:
    return deparse(a) == deparse(b)  # node equality would compare source locations too


def _integer(node: Any) -> int | None:
    if isinstance(node, ast.A_Const) and isinstance(node.val, ast.Integer):
        return int(node.val.ival or 0)
    return None


def _bare_name(node: Any) -> str | None:
    fields: Any = getattr(node, "fields", None)
    if isinstance(node, ast.ColumnRef) and len(fields) == 1 and isinstance(fields[0], ast.String):
        return str(fields[0].sval)
    return None


def _last_field(node: Any) -> Any:
    fields: Any = node.fields
    return fields[-1]


def sort_keys(stmt: ast.SelectStmt, names: Sequence[str]) -> list[SortKey]:
    """How each ORDER BY item of `stmt` maps onto its output columns (`names`, from PostgreSQL),
    with PostgreSQL's own rules: a number is a position, a bare name an output column (output
    names come first in ORDER BY), anything else an expression, which sorts by an output column
    when it is that column's expression."""
    plain = stmt.op == enums.SetOperation.SETOP_NONE and stmt.valuesLists is None
    distinct = plain and stmt.distinctClause is not None and stmt.distinctClause == (None,)
    targets = list(stmt.targetList or ()) if plain else []
    keys: list[SortKey] = []
    for item in stmt.sortClause or ():
        node: Any = item.node
        position = _integer(node)
        name = _bare_name(node)
        if position is None and name is not None and name in names:
            position = names.index(name) + 1
        if position is None:
            # The expression of an explicit (non-star) target: PostgreSQL sorts by that target,
            # which matters when it is volatile (ORDER BY random() must sort the rows by the
            # random() they show). Targets before the first star map 1:1 onto outputs.
            for index, target in enumerate(targets):
                if isinstance(target.val, ast.ColumnRef) and isinstance(
                    _last_field(target.val), ast.A_Star
                ):
                    break
                if _same(target.val, node):
                    position = index + 1
                    break
        if position is None and (not plain or distinct):
            # With DISTINCT and after UNION & co PostgreSQL only sorts by output columns, and has
            # accepted this statement, so the item names one; a qualified column reference
            # (t.title) is the output column of that name when only one has it.
            if isinstance(node, ast.ColumnRef) and isinstance(_last_field(node), ast.String):
                last = _last_field(node).sval
                if names.count(last) == 1:
                    position = names.index(last) + 1
            if position is None:
                raise InvalidSqlError(
                    f"Cannot tell which output column this ORDER BY item sorts by: {deparse(node)}",
                    suggestion="Order by the output column's name or position.",
                )
        keys.append(SortKey(item, position=position, hidden=None if position else node))
    return keys


def limit_inner(stmt: ast.SelectStmt, rows: int) -> None:
    """`LIMIT rows` on the caller's statement where that keeps its meaning: no LIMIT (an
    OFFSET stays), LIMIT ALL, or a larger constant LIMIT. A smaller LIMIT, WITH TIES (which may
    return more than its count), a $n or an expression stay as written: the wrapper's own
    LIMIT bounds those."""
    option = stmt.limitOption
    if option == enums.LimitOption.LIMIT_OPTION_WITH_TIES:
        return
    current = stmt.limitCount
    null = isinstance(current, ast.A_Const) and current.isnull
    count = _integer(current)
    if current is None or null or (count is not None and count > rows):
        stmt.limitCount = ast.A_Const(val=ast.Integer(rows))
        stmt.limitOption = enums.LimitOption.LIMIT_OPTION_COUNT


@dataclass(frozen=True)
class Wrapper:
    sql: str
    columns: int


def _template(
    columns: int,
    typed: Sequence[int],
    hidden: int,
    cells: str,
    limit: int,
    max_bytes: int,
    page_bytes: int,
) -> str:
    """The wrapper's own SQL text (nothing of the caller's in it): the caller's statement and
    the sort keys are grafted into its tree by `build`."""
    c = range(1, columns + 1)
    aliases = [f"c{i}" for i in c] + [f'"{_KEY.format(i)}"' for i in range(1, hidden + 1)]
    kept = f"w.size < {int(max_bytes)} AND w.n <= {int(limit)}"
    first = f"{kept} AND (w.size < {int(page_bytes)} OR w.n = 1)"
    rest = f"{kept} AND w.size >= {int(page_bytes)} AND w.n > 1"
    return (
        f"SELECT pg_catalog.count(*) AS total, pg_catalog.count(*) FILTER (WHERE {kept}) AS kept,"
        f" pg_catalog.string_agg(w.r, ',' ORDER BY w.n) FILTER (WHERE {first}) AS rows,"
        f" pg_catalog.array_agg(w.r ORDER BY w.n) FILTER (WHERE {rest}) AS rest"
        + "".join(
            f", (pg_catalog.array_agg(w.t{i}) FILTER (WHERE false))[1] AS t{i}" for i in typed
        )
        + " FROM (SELECT m.r"
        + "".join(f", m.t{i}" for i in typed)
        + ", pg_catalog.row_number() OVER win AS n,"
        " pg_catalog.sum(pg_catalog.octet_length(m.r) + 1) OVER win AS size"
        f" FROM (SELECT {cells} AS r"
        + "".join(f", CASE WHEN false THEN s.c{i} END AS t{i}" for i in typed)
        + f" FROM (SELECT 1) AS s({', '.join([*aliases, chr(34) + SENTINEL + chr(34)])})"
        f' WHERE s."{SENTINEL}" LIMIT {int(limit) + 1}) AS m'
        " WINDOW win AS (ROWS UNBOUNDED PRECEDING)) AS w"
    )


def build(
    stmt: ast.SelectStmt,
    names: Sequence[str],
    cell: Callable[[int], str],
    *,
    typed: Sequence[int],
    limit: int,
    max_bytes: int,
    page_bytes: int | None = None,
) -> Wrapper:
    """The wrapper around `stmt` (left unchanged) for a result of `names`, whose column i
    (1-based) becomes JSON through the SQL expression `cell(i)` (over `s.c<i>`); the columns
    in `typed` get a typed NULL each (see the module's docstring)."""
    inner = copy.deepcopy(stmt)
    keys = sort_keys(inner, names)
    limit_inner(inner, limit + 1)
    hidden = [k.hidden for k in keys if k.hidden is not None]
    _append_targets(
        inner,
        [
            *(
                ast.ResTarget(name=_KEY.format(i), val=copy.deepcopy(node))
                for i, node in enumerate(hidden, start=1)
            ),
            ast.ResTarget(name=SENTINEL, val=ast.A_Const(val=ast.Boolean(True))),
        ],
    )
    columns = len(names)
    cells = (
        "'[' || pg_catalog.array_to_string(ARRAY["
        + ", ".join(cell(i) for i in range(1, columns + 1))
        + "]::pg_catalog.text[], ',', 'null') || ']'"
        if columns
        else "'[]'"
    )
    page = max_bytes if page_bytes is None else min(page_bytes, max_bytes)
    (raw,) = parse_sql(_template(columns, typed, len(hidden), cells, limit, max_bytes, page))
    outer: Any = pin_tree(raw.stmt)  # ours only: the caller's statement goes in below
    window_level = outer.fromClause[0].subquery
    middle = window_level.fromClause[0].subquery
    middle.fromClause[0].subquery = inner
    # Every level orders by the caller's own keys: output columns by position, the others
    # through their hidden columns.
    refs: list[ast.Node] = []
    hidden_number = 0
    for key in keys:
        if key.position is not None:
            name = f"c{key.position}"
        else:
            hidden_number += 1
            name = _KEY.format(hidden_number)
        refs.append(ast.ColumnRef(fields=(ast.String("s"), ast.String(name))))
    middle.targetList = (
        *middle.targetList,
        *(ast.ResTarget(name=f"k{i}", val=ref) for i, ref in enumerate(refs, start=1)),
    )
    middle.sortClause = _sort_by(keys, refs) or None
    window_level.windowClause[0].orderClause = (
        _sort_by(
            keys,
            [
                ast.ColumnRef(fields=(ast.String("m"), ast.String(f"k{i}")))
                for i in range(1, len(keys) + 1)
            ],
        )
        or None
    )
    return Wrapper(sql=deparse(outer), columns=columns)


def _sort_by(keys: Sequence[SortKey], references: Sequence[ast.Node]) -> tuple[ast.SortBy, ...]:
    return tuple(
        ast.SortBy(
            node=ref,
            sortby_dir=key.clause.sortby_dir,
            sortby_nulls=key.clause.sortby_nulls,
            useOp=key.clause.useOp,
        )
        for key, ref in zip(keys, references, strict=True)
    )


def _append_targets(stmt: Any, targets: list[ast.ResTarget]) -> None:
    """Extra output columns after the caller's own (a set operation gets them on every branch,
    VALUES on every row, so their meaning stays the same)."""
    if stmt.op != enums.SetOperation.SETOP_NONE:
        _append_targets(stmt.larg, targets)
        _append_targets(stmt.rarg, targets)
    elif stmt.valuesLists is not None:
        stmt.valuesLists = tuple(
            (*row, *(copy.deepcopy(t.val) for t in targets)) for row in stmt.valuesLists
        )
    else:
        stmt.targetList = (*(stmt.targetList or ()), *copy.deepcopy(targets))

"""Which output columns of a statement can carry a sensitive value, and which uses of one are
refused: the statement's parse tree (pglast JSON) followed from each output back to the
sensitive sources of database/rows/redaction.py, through aliases, subqueries, CTEs, set operations,
joins (USING too), views' definitions, functions in FROM (by the columns they may return) and
whole-row references (`t`, `t.*`, `(t).f`, `row_to_json(t)`, `ROW(t.*)`).

The caller's SQL may *carry* a sensitive value to an output, whose cells then come back as
"[REDACTED]": a column reference, a field of a row, ROW(...), ARRAY[...], coalesce(...), a CASE
branch, a scalar or ARRAY subquery, or one of the functions in `CARRIERS` (JSON and array
builders, which cannot fail on a value). It may test one with IS [NOT] NULL, or count it, which
shows no more than a redacted cell does (whether it is NULL). Any other use is refused
(`SensitiveUseError`): an expression (`upper(password)`, a cast, a comparison), a WHERE, JOIN,
GROUP BY, HAVING, ORDER BY or DISTINCT over it, or a UNION / INTERSECT / EXCEPT that compares
it. Each of those would be an oracle: the rows, their order or an error would tell the value,
one guess at a time, even with every cell redacted. A view's definition is the database
owner's, so within it any expression carries (its output is redacted) and nothing is refused.

Names are resolved conservatively (when in doubt, a reference carries): a bare column name
carries when any FROM item in scope has a sensitive column of that name.

Its size (~720 lines) is one walk over PostgreSQL's expression nodes, each kind of node next
to the others: split, the scopes it keeps would have to travel between modules.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pg_mcp_server.database.rows.redaction import (
    CREDENTIAL_COLUMNS,
    CREDENTIAL_SETTINGS,
    SETTINGS_COLUMNS,
    SETTINGS_FUNCTIONS,
    STATISTICS_COLUMNS,
    VIEW_DEPTH,
    XML_READERS,
    Facts,
    Key,
    Relation,
    node as _node,
    wanted,
)
from pg_mcp_server.database.sql import names, tree as sqltree
from pg_mcp_server.errors import PermissionDeniedError

# Functions that pass a value on without looking at it (no error or branch depends on it).
CARRIERS = frozenset(
    {
        "array_agg",
        "array_to_json",
        "json_agg",
        "json_build_array",
        "json_build_object",
        "jsonb_agg",
        "jsonb_build_array",
        "jsonb_build_object",
        "row_to_json",
        "to_json",
        "to_jsonb",
    }
)
_CARRYING_SUBLINKS = frozenset({"EXPR_SUBLINK", "ARRAY_SUBLINK", "MULTIEXPR_SUBLINK"})


@dataclass
class _Item:
    """A FROM item in scope: the name it is referred to by, and its columns (name, carries a
    sensitive value); `exact` is False when only some are known (a function without a
    column list), `tainted` then says whether the unknown ones may carry one."""

    name: str | None
    columns: list[tuple[str, bool]]
    exact: bool = True
    tainted: bool = False

    @property
    def whole(self) -> bool:
        return self.tainted or any(t for _, t in self.columns)

    def column(self, name: str) -> bool:
        return any(t for n, t in self.columns if n == name) or (not self.exact and self.tainted)


@dataclass
class _Outs:
    columns: list[tuple[str, bool]]
    exact: bool = True


def _children(body: Any) -> Iterator[Any]:
    """The nodes directly under a node's body (through plain lists and structs)."""
    stack = [body]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            if _node(item) is not None:
                yield item
            else:
                stack.extend(reversed(list(item.values())))


def _integer(node: Any) -> int | None:
    found = _node(node)
    if found and found[0] == "A_Const" and "ival" in found[1]:
        return int(found[1]["ival"].get("ival", 0))
    return None


def _label(body: dict[str, Any]) -> str:
    """The name PostgreSQL gives an output column (FigureColname, for the common cases)."""
    if body.get("name"):
        return str(body["name"])
    val = body.get("val")
    while True:
        found = _node(val)
        if found is None:
            return "?column?"
        key, inner = found
        if key == "ColumnRef":
            parts = names(inner.get("fields", []))
            return parts[-1] if parts else "?column?"
        if key == "FuncCall":
            return names(inner.get("funcname", []))[-1]
        if key == "A_Indirection":
            parts = names(inner.get("indirection", []))
            if parts:
                return parts[-1]
            val = inner.get("arg")
        elif key == "TypeCast":
            val = inner.get("arg")
            inner_arg = _node(val)
            if inner_arg and inner_arg[0] == "A_Const":
                type_names = names(inner.get("typeName", {}).get("names", []))
                return type_names[-1] if type_names else "?column?"
        elif key == "CoalesceExpr":
            return "coalesce"
        elif key == "RowExpr":
            return "row"
        elif key == "A_ArrayExpr":
            return "array"
        elif key == "SubLink":
            if inner.get("subLinkType") == "EXISTS_SUBLINK":
                return "exists"
            if inner.get("subLinkType") == "ARRAY_SUBLINK":
                return "array"
            return "?column?"
        else:
            return "?column?"


class Analysis:
    """One statement (or view definition) followed from its outputs back to its sources."""

    def __init__(
        self,
        pattern: re.Pattern[str] | None,
        facts: Facts,
        *,
        strict: bool = True,
        depth: int = 0,
        views: dict[Key, list[bool] | None] | None = None,
    ) -> None:
        self.pattern = pattern
        self.facts = facts
        self.strict = strict
        self.depth = depth
        self.views: dict[Key, list[bool] | None] = {} if views is None else views
        self.scopes: list[list[_Item]] = []
        self.ctes: list[dict[str, _Outs]] = []
        self.reads_sensitive = False  # a sensitive source is referred to anywhere

    # --- names ---------------------------------------------------------------------------

    def matches(self, name: str) -> bool:
        return self.pattern is not None and self.pattern.search(name) is not None

    def _items(self) -> Iterator[_Item]:
        for level in reversed(self.scopes):
            yield from level

    def ref(self, body: dict[str, Any]) -> tuple[bool, str]:
        """Whether a column reference may carry a sensitive value, and what it names."""
        fields = body.get("fields", [])
        parts = names(fields)
        star = bool(fields) and "A_Star" in fields[-1]
        label = ".".join([*parts, "*"] if star else parts)
        if star:
            if not parts:
                innermost = self.scopes[-1] if self.scopes else []
                return any(i.whole for i in innermost), label
            return any(i.whole for i in self._items() if i.name == parts[-1]), label
        if len(parts) == 1:
            (name,) = parts
            tainted = (
                self.matches(name)
                or any(i.column(name) for i in self._items())
                or any(i.whole for i in self._items() if i.name == name)
            )
            return tainted, label
        column, qualifier = parts[-1], parts[-2]
        tainted = self.matches(column) or any(
            i.column(column) for i in self._items() if i.name == qualifier
        )
        if len(parts) >= 3:  # table.column.field: the field of a composite column
            tainted = (
                tainted
                or self.matches(qualifier)
                or any(i.column(qualifier) for i in self._items() if i.name == parts[-3])
            )
        return tainted, label

    def _sensitive(self, tainted: bool, label: str) -> bool:
        if tainted:
            self.reads_sensitive = True
        return tainted

    # --- expressions -------------------------------------------------------------------

    def value(self, node: Any) -> bool:
        """Whether `node`, in a position whose value reaches an output, carries a sensitive
        value (refusing, when strict, a use that would tell it)."""
        found = _node(node)
        if found is None:
            return False
        key, body = found
        if key == "ColumnRef":
            return self._sensitive(*self.ref(body))
        if key == "A_Indirection":
            field = self._field(body)
            tainted = field if field is not None else self.value(body.get("arg"))
            for item in body.get("indirection", []):
                index = _node(item)
                if index and index[0] == "A_Indices":
                    self.test(item)
            return tainted
        if key in ("RowExpr", "CoalesceExpr"):
            return any([self.value(a) for a in body.get("args", [])])
        if key == "A_ArrayExpr":
            return any([self.value(e) for e in body.get("elements", [])])
        if key in ("A_Const", "ParamRef"):
            return False
        if key == "CaseExpr" and self.strict:  # the branches carry; what picks one is looked at
            self.test(body.get("arg"))
            tainted = self.value(body.get("defresult"))
            for when in body.get("args", []):
                self.test(when["CaseWhen"].get("expr"))
                tainted = self.value(when["CaseWhen"].get("result")) or tainted
            return tainted
        if key == "NullTest":
            self.value(body.get("arg"))
            return False
        if key == "SubLink":
            return self.sublink(body, carry=True)
        if key == "FuncCall" and self._catalog_function(body):
            name = names(body["funcname"])[-1]
            if name in SETTINGS_FUNCTIONS and self._settings_call(name, body):
                self.reads_sensitive = True
                if self.strict:  # its value is a setting's, not a carrier of one
                    self.test({"List": {"items": body.get("args", [])}})
                return True
            if name in XML_READERS:
                self.reads_sensitive = True
                return True
            if name == "count" or name in CARRIERS:
                tainted = any([self.value(a) for a in body.get("args", [])])
                for part in ("agg_order", "agg_filter", "over"):
                    if part in body:
                        self.test({"List": {"items": [body[part]]}})
                if tainted and body.get("agg_distinct") and self.strict:
                    raise _refuse("compares values (DISTINCT) of", self._first(body))
                return tainted and name != "count"
        if self.strict:
            self.test(node)
            return False
        return any([self.value(child) for child in _children(body)])

    def test(self, node: Any) -> None:
        """Refuse (when strict) a sensitive value in a position that looks at it."""
        found = _node(node)
        if found is None:
            return
        key, body = found
        if key == "ColumnRef":
            tainted, label = self.ref(body)
            if self._sensitive(tainted, label) and self.strict:
                raise _refuse("computes on, filters or sorts by", label)
            return
        if key == "NullTest":
            self.value(body.get("arg"))
            return
        if key == "SubLink":
            self.sublink(body, carry=False)
            return
        if key == "FuncCall" and self._catalog_function(body):
            name = names(body["funcname"])[-1]
            if name == "count" and not body.get("agg_distinct"):
                self.value(node)
                return
            if name in SETTINGS_FUNCTIONS and self._settings_call(name, body):
                self.reads_sensitive = True
                if self.strict:
                    raise _refuse("computes on, filters or sorts by", f"{name}(...)")
            if name in XML_READERS:
                self.reads_sensitive = True
                if self.strict:
                    raise _refuse("computes on, filters or sorts by", f"{name}(...)")
        for child in _children(body):
            self.test(child)

    def _field(self, body: dict[str, Any]) -> bool | None:
        """A field of a FROM item's whole row, `(t).id` or `(t.*).id`: that column's taint
        (None when the indirection is something else)."""
        arg = _node(body.get("arg"))
        first = _node((body.get("indirection") or [None])[0])
        if arg is None or arg[0] != "ColumnRef" or first is None or first[0] != "String":
            return None
        fields = arg[1].get("fields", [])
        parts = names(fields)
        star = len(fields) == 2 and "A_Star" in fields[-1]
        if len(parts) != 1 or len(fields) != 1 + star:
            return None
        (name,) = parts
        items = [i for i in self._items() if i.name == name]
        if len(items) != 1 or any(n == name for i in self._items() for n, _ in i.columns):
            return None  # two items of that name, or a column: not one item's row
        field = str(first[1]["sval"])
        return self._sensitive(items[0].column(field), f"({name}).{field}")

    def _first(self, body: dict[str, Any]) -> str:
        for key, value in sqltree.walk(body):
            if key == "ColumnRef":
                tainted, label = self.ref(value)
                if tainted:
                    return label
        return "?"

    def _catalog_function(self, body: dict[str, Any]) -> bool:
        parts = names(body.get("funcname", []))
        return bool(parts) and parts[:-1] in ([], ["pg_catalog"])

    def _settings_call(self, name: str, body: dict[str, Any]) -> bool:
        """Whether a call of a settings function may return a credential setting's value."""
        if not self.facts.settings:
            return False
        if name != "current_setting":
            return True
        args = body.get("args", [])
        setting = sqltree_literal(args[0]) if args else None
        return setting is None or setting.lower() in CREDENTIAL_SETTINGS

    def sublink(self, body: dict[str, Any], *, carry: bool) -> bool:
        kind = body.get("subLinkType", "")
        outs = self.select(body["subselect"]["SelectStmt"])
        tainted = any(t for _, t in outs.columns)
        if kind in _CARRYING_SUBLINKS:
            if tainted and not carry and self.strict:
                raise _refuse("computes on, filters or sorts by", self._tainted_name(outs))
            return tainted
        if kind == "EXISTS_SUBLINK":
            return False
        # ANY / ALL / a row comparison: compares its test expression with the outputs.
        if "testexpr" in body:
            if self.strict:
                self.test(body["testexpr"])
            elif self.value(body["testexpr"]):
                return True
        if tainted and self.strict:
            raise _refuse("compares", self._tainted_name(outs))
        return tainted

    @staticmethod
    def _tainted_name(outs: _Outs) -> str:
        return next((n for n, t in outs.columns if t), "?")

    # --- statements ----------------------------------------------------------------------

    def select(self, stmt: dict[str, Any]) -> _Outs:
        """The outputs of one SELECT (or set operation, or VALUES) in the current scopes."""
        self.ctes.append({})
        try:
            return self._select(stmt)
        finally:
            self.ctes.pop()

    def _select(self, stmt: dict[str, Any]) -> _Outs:
        for cte in (stmt.get("withClause") or {}).get("ctes", []):
            self._cte(cte["CommonTableExpr"], bool(stmt["withClause"].get("recursive")))
        if stmt.get("op", "SETOP_NONE") != "SETOP_NONE":
            left, right = self.select(stmt["larg"]), self.select(stmt["rarg"])
            outs = _combine(left, right)
            compares = not (stmt["op"] == "SETOP_UNION" and stmt.get("all"))
            if compares and self.strict and any(t for _, t in outs.columns):
                raise _refuse("compares values (UNION, INTERSECT or EXCEPT) of", _name(outs))
            self._ordering(stmt, outs)
            return outs
        if "valuesLists" in stmt:
            rows = [row["List"]["items"] for row in stmt["valuesLists"]]
            width = max((len(r) for r in rows), default=0)
            taint = [False] * width
            for row in rows:
                for i, cell in enumerate(row):
                    taint[i] = self.value(cell) or taint[i]
            outs = _Outs([(f"column{i + 1}", t) for i, t in enumerate(taint)])
            self._ordering(stmt, outs)
            return outs
        level: list[_Item] = []
        tops: list[_Item] = []
        self.scopes.append(level)
        try:
            for entry in stmt.get("fromClause", []):
                tops.append(self._from(entry, level))
            for part in ("whereClause", "havingClause"):
                if part in stmt:
                    self.test(stmt[part])
            for window in stmt.get("windowClause", []):
                self.test(window)
            columns: list[tuple[str, bool]] = []
            exact = True
            for target in stmt.get("targetList", []):
                body = target["ResTarget"]
                val = _node(body.get("val"))
                fields = val[1].get("fields", []) if val and val[0] == "ColumnRef" else []
                if fields and "A_Star" in fields[-1]:
                    parts = names(fields)
                    expanded = [i for i in tops] if not parts else self._named(parts[-1])
                    for item in expanded:
                        columns.extend(item.columns)
                        exact = exact and item.exact
                        if item.whole:
                            self.reads_sensitive = True
                        if not item.exact and item.tainted:
                            columns.append(("?", True))
                    continue
                columns.append((_label(body), self.value(body.get("val"))))
            outs = _Outs(columns, exact)
            distinct = stmt.get("distinctClause")
            if distinct == [{}]:
                if self.strict and any(t for _, t in columns):
                    raise _refuse("compares values (DISTINCT) of", _name(outs))
            elif distinct:
                self._keys(distinct, outs)
            self._keys(stmt.get("groupClause", []), outs)
            self._ordering(stmt, outs)
            return outs
        finally:
            self.scopes.pop()

    def _ordering(self, stmt: dict[str, Any], outs: _Outs) -> None:
        self._keys([s["SortBy"]["node"] for s in stmt.get("sortClause", [])], outs)
        for part in ("limitCount", "limitOffset"):
            if part in stmt:
                self.test(stmt[part])

    def _keys(self, keys: Iterable[Any], outs: _Outs) -> None:
        """ORDER BY / GROUP BY / DISTINCT ON items: an output's position or name sorts by
        that output."""
        for key in keys:
            position = _integer(key)
            found = _node(key)
            bare = names(found[1].get("fields", [])) if found and found[0] == "ColumnRef" else []
            if position is not None and 0 < position <= len(outs.columns):
                name, tainted = outs.columns[position - 1]
                if tainted and self.strict:
                    raise _refuse("sorts or groups by", name)
                continue
            named = len(bare) == 1 and any(n == bare[0] and t for n, t in outs.columns)
            if named and self.strict:
                raise _refuse("sorts or groups by", bare[0])
            self.test(key)

    def _named(self, name: str) -> list[_Item]:
        return [next((i for i in self._items() if i.name == name), _Item(name, [], False))]

    def _cte(self, cte: dict[str, Any], recursive: bool) -> None:
        name = cte["ctename"]
        aliases = names(cte.get("aliascolnames", []))
        query = cte["ctequery"]["SelectStmt"]
        if recursive:
            self.ctes[-1][name] = _Outs([], exact=False)
        for _ in range(3 if recursive else 1):  # a recursive CTE's taint settles quickly
            outs = self.select(query)
            self.ctes[-1][name] = _renamed(outs, aliases)

    def _cte_named(self, name: str) -> _Outs | None:
        for level in reversed(self.ctes):
            if name in level:
                return level[name]
        return None

    def _from(self, entry: Any, level: list[_Item]) -> _Item:
        """One FROM entry, its items added to `level`; the item its columns expand to."""
        found = _node(entry)
        if found is None:
            return _Item(None, [], exact=False)
        key, body = found
        alias = body.get("alias") or {}
        aliasname = alias.get("aliasname")
        colnames = names(alias.get("colnames", []))
        if key == "RangeVar":
            item = self._relation(body, aliasname or body.get("relname"), colnames)
        elif key == "RangeSubselect":
            outs = self.select(body["subquery"]["SelectStmt"])
            renamed = _renamed(outs, colnames)
            item = _Item(aliasname, renamed.columns, renamed.exact)
        elif key == "RangeFunction":
            item = self._function(body, aliasname, colnames)
        elif key == "JoinExpr":
            return self._join(body, level, aliasname, colnames)
        elif key == "RangeTableSample":
            self.test({"List": {"items": [*body.get("args", []), body.get("repeatable")]}})
            return self._from(body["relation"], level)
        else:  # XMLTABLE, JSON_TABLE: their document is looked at
            tainted = self._looked_at(body)
            item = _Item(aliasname, [(n, tainted) for n in colnames], exact=False, tainted=tainted)
        level.append(item)
        return item

    def _looked_at(self, body: dict[str, Any]) -> bool:
        if self.strict:
            self.test({"List": {"items": list(_children(body))}})
            return False
        return any([self.value(child) for child in _children(body)])

    def _relation(self, body: dict[str, Any], name: str | None, colnames: list[str]) -> _Item:
        relname = body.get("relname", "")
        schema = body.get("schemaname")
        if schema is None:
            cte = self._cte_named(relname)
            if cte is not None:
                renamed = _renamed(cte, colnames)
                return _Item(name, renamed.columns, renamed.exact)
        if (schema, relname) not in self.facts.relations:  # not read: may carry anything
            return _Item(name, [], exact=False, tainted=True)
        rel = self.facts.relations[(schema, relname)]
        if rel is None:  # no such relation (PostgreSQL will say): nothing to follow
            return _Item(name, [], exact=False)
        key = (rel.schema, rel.name)
        listed = any(key in m for m in (CREDENTIAL_COLUMNS, SETTINGS_COLUMNS, STATISTICS_COLUMNS))
        special = CREDENTIAL_COLUMNS.get(key, frozenset())
        if self.facts.settings:
            special = special | SETTINGS_COLUMNS.get(key, frozenset())
        if self.pattern is not None:
            special = special | STATISTICS_COLUMNS.get(key, frozenset())
        # A listed catalog view's sensitive columns are those listed (pg_settings' name is
        # computed from a settings function, yet tells nothing).
        derived = self._view((schema, relname), rel) if rel.is_view and not listed else None
        columns = []
        for i, column in enumerate(rel.columns):
            tainted = self.matches(column) or column in special
            if rel.is_view and not listed:
                tainted = tainted or derived is None or (i < len(derived) and derived[i])
            shown = colnames[i] if i < len(colnames) else column
            columns.append((shown, tainted))
        return _Item(name, columns)

    def _view(self, key: Key, rel: Relation) -> list[bool] | None:
        """Which of a view's columns carry a sensitive value; None: could not tell (all)."""
        if key in self.views:
            return self.views[key]
        self.views[key] = None  # while following it (a view cannot refer to itself)
        if rel.definition is None or self.depth >= VIEW_DEPTH:
            return None
        stmts = rel.definition.get("stmts", [])
        if len(stmts) != 1 or "SelectStmt" not in stmts[0].get("stmt", {}):
            return None
        inner = Analysis(
            self.pattern, self.facts, strict=False, depth=self.depth + 1, views=self.views
        )
        outs = inner.select(stmts[0]["stmt"]["SelectStmt"])
        result = [t for _, t in outs.columns] if outs.exact else None
        self.views[key] = result
        return result

    def _function(self, body: dict[str, Any], name: str | None, colnames: list[str]) -> _Item:
        """A function in FROM: its columns carry what its arguments do (when it may return a
        credential setting, that too); what it returns is known by name only."""
        tainted = False
        labels: list[str] = []
        for entry in body.get("functions", []):
            items = entry["List"]["items"]
            found = _node(items[0]) if items else None
            if found and found[0] == "FuncCall":
                fname = names(found[1]["funcname"])[-1]
                labels.append(fname)
                if self._catalog_function(found[1]) and (
                    (fname in SETTINGS_FUNCTIONS and self._settings_call(fname, found[1]))
                    or fname in XML_READERS
                ):
                    self.reads_sensitive = True
                    tainted = True
            tainted = self._looked_at({"List": {"items": items[:1]}}) or tainted
            for definition in items[1] if len(items) > 1 and isinstance(items[1], list) else ():
                labels.append(definition["ColumnDef"]["colname"])
        defined = [c["ColumnDef"]["colname"] for c in body.get("coldeflist", [])]
        shown = colnames or defined or labels[:1]
        exact = bool(colnames or defined)
        # What the functions may return, by name (every overload's): a row of one whose
        # column matches the pattern carries a sensitive value.
        returned = {n for k in self._calls(body) for n in self.facts.functions.get(k, ())}
        if exact:  # renamed by the caller: which column is which is not known here
            carries = tainted or any(self.matches(n) for n in returned)
            columns = [(n, carries or self.matches(n)) for n in shown]
        else:
            shown = list(dict.fromkeys([*shown, *sorted(returned)]))
            columns = [(n, tainted or self.matches(n)) for n in shown]
        return _Item(name or (labels[0] if labels else None), columns, exact, tainted)

    @staticmethod
    def _calls(body: dict[str, Any]) -> set[Key]:
        return wanted({"RangeFunction": body})[1]

    def _join(
        self, body: dict[str, Any], level: list[_Item], alias: str | None, colnames: list[str]
    ) -> _Item:
        left = self._from(body["larg"], level)
        right = self._from(body["rarg"], level)
        if "quals" in body:
            self.test(body["quals"])
        using = names(body.get("usingClause", []))
        if body.get("isNatural") and left.exact and right.exact:
            right_names = {n for n, _ in right.columns}
            using = [n for n, _ in left.columns if n in right_names]
        merged = [(n, left.column(n) or right.column(n)) for n in using]
        for n, tainted in merged:
            # USING and NATURAL compare the two sides' columns as ON would: a join on a
            # sensitive column against a list of guesses tells which guess is right.
            if self._sensitive(tainted, n) and self.strict:
                raise _refuse("compares (JOIN ... USING or NATURAL JOIN)", n)
        columns = (
            merged
            + [c for c in left.columns if c[0] not in using]
            + [c for c in right.columns if c[0] not in using]
        )
        renamed = _renamed(_Outs(columns, left.exact and right.exact), colnames)
        item = _Item(alias, renamed.columns, renamed.exact, left.tainted or right.tainted)
        if alias:
            level.append(item)
        return item


def sqltree_literal(node: Any) -> str | None:
    found = _node(node)
    while found and found[0] == "TypeCast":
        found = _node(found[1].get("arg"))
    if found and found[0] == "A_Const" and "sval" in found[1]:
        return str(found[1]["sval"].get("sval", ""))
    return None


def _renamed(outs: _Outs, aliases: Sequence[str]) -> _Outs:
    columns = [(aliases[i] if i < len(aliases) else n, t) for i, (n, t) in enumerate(outs.columns)]
    return _Outs(columns, outs.exact)


def _combine(left: _Outs, right: _Outs) -> _Outs:
    if left.exact and right.exact and len(left.columns) == len(right.columns):
        return _Outs(
            [(n, t or u) for (n, t), (_, u) in zip(left.columns, right.columns, strict=True)]
        )
    tainted = any(t for _, t in left.columns + right.columns)
    return _Outs([(n, t or tainted) for n, t in left.columns], exact=False)


def _name(outs: _Outs) -> str:
    return next((n for n, t in outs.columns if t), "?")


@dataclass(frozen=True)
class Verdict:
    """Which of a statement's output columns (as PostgreSQL described them) are redacted,
    and whether it reads a sensitive source anywhere (its errors are then scrubbed)."""

    redacted: tuple[bool, ...]
    reads_sensitive: bool


def judge(
    tree: dict[str, Any],
    output_names: Sequence[str] | None,
    pattern: re.Pattern[str] | None,
    facts: Facts,
) -> Verdict:
    """The verdict for one SELECT (pglast JSON of the statement list) whose outputs
    PostgreSQL described as `output_names` (None: outputs not shown, as under EXPLAIN);
    raises SensitiveUseError for a use that would tell a sensitive value."""
    analysis = Analysis(pattern, facts)
    outs = analysis.select(tree["stmts"][0]["stmt"]["SelectStmt"])
    if output_names is None:
        return Verdict((), analysis.reads_sensitive or any(t for _, t in outs.columns))
    if outs.exact and len(outs.columns) == len(output_names):
        taint = [t for _, t in outs.columns]
    else:  # a star over something of unknown width: by name
        tainted_names = {n for n, t in outs.columns if t}
        anonymous = "?" in tainted_names
        taint = [n in tainted_names or anonymous for n in output_names]
    redacted = tuple(
        t or (pattern is not None and pattern.search(n) is not None)
        for t, n in zip(taint, output_names, strict=True)
    )
    return Verdict(redacted, analysis.reads_sensitive or any(redacted))


class SensitiveUseError(PermissionDeniedError):
    """A sensitive value used where the result would tell it (see the module's docstring)."""


def _refuse(what: str, column: str) -> SensitiveUseError:
    return SensitiveUseError(
        f"The query {what} the sensitive column '{column}', whose values are redacted; "
        "the result would tell its value.",
        suggestion="Select the column as it is (its values come back as [REDACTED]) or test "
        "it with IS NULL / IS NOT NULL; for anything else ask the database owner for a view "
        "or for column privileges.",
        context={"rule": "sensitive_column", "column": column},
    )

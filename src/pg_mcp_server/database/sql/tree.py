"""Reading pglast's JSON parse trees: one walker for the guard, the safety catalog and plans."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from pglast import parser


class TooDeepError(ValueError):
    """The parse tree nests deeper than Python's JSON decoder can follow."""


def loads(text: str) -> dict[str, Any]:
    """pglast's JSON as a dict. Very deep trees (about 500 nested subqueries or operators, a
    UNION of as many arms) exceed the decoder's recursion limit: TooDeepError."""
    try:
        tree: dict[str, Any] = json.loads(text)
    except RecursionError:
        raise TooDeepError("the statement is nested too deeply") from None
    return tree


# NAMEDATALEN - 1: the bytes of an identifier PostgreSQL keeps.
NAME_BYTES = 63


def long_identifier(sql: str) -> str | None:
    """The first identifier in `sql` longer than PostgreSQL keeps (63 bytes), as written, if
    any. pglast cuts such a name at 63 bytes of UTF-8, PostgreSQL at 63 bytes of the
    database's encoding: in a database that is not UTF-8 (LATIN1: `é` is one byte) the two
    keep different names, and the guard would judge another object than PostgreSQL reads
    (attack6). A Unicode-escaped name (U&"...") is measured as written."""
    try:
        tokens = parser.scan(sql)
    except parser.ParseError:
        return None  # the parse that follows says why
    for token in tokens:
        if token.name not in ("IDENT", "UIDENT"):
            continue
        text = sql[token.start : token.end + 1]
        quoted = token.name == "IDENT" and text.startswith('"')
        value = text[1:-1].replace('""', '"') if quoted else text
        if len(value.encode()) > NAME_BYTES:
            return text
    return None


def parse(sql: str) -> dict[str, Any] | None:
    """The parse tree of `sql`, or None when it does not parse (or nests too deeply)."""
    try:
        return loads(parser.parse_sql_json(sql))
    except (parser.ParseError, TooDeepError):
        return None


def walk(node: Any) -> Iterator[tuple[str, Any]]:
    """Every (key, value) pair in the tree, depth first."""
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


def names(items: list[dict[str, Any]]) -> list[str]:
    """The strings of a name list (`funcname`, `fields`, `names`, an operator's `name`)."""
    return [i["String"]["sval"] for i in items if "String" in i]


def last_names(tree: Any, node: str, field: str) -> set[str]:
    """The last part of every `node`'s `field` name list, e.g. function or column names."""
    found: set[str] = set()
    for key, value in walk(tree):
        if key == node and isinstance(value, dict):
            found.update(names(value.get(field, []))[-1:])
    return found


_IDENTIFIER = re.compile(r'\s*(?:"((?:[^"]|"")+)"|([^".\s]+))\s*')


def qualified_name(text: str) -> list[str] | None:
    """The parts of a possibly qualified name given as text, as `'x'::regclass` reads it
    (quoted parts kept, the others folded to lower case); None when it is not such a name."""
    parts: list[str] = []
    pos = 0
    while True:
        match = _IDENTIFIER.match(text, pos)
        if match is None:
            return None
        quoted, plain = match.groups()
        parts.append(quoted.replace('""', '"') if quoted is not None else plain.lower())
        pos = match.end()
        if pos == len(text):
            return parts if len(parts) <= 3 else None
        if text[pos] != ".":
            return None
        pos += 1


def type_name(text: str) -> tuple[str | None, str] | None:
    """(schema, name) of a type given as text (`pg_input_is_valid`'s argument), read the way
    PostgreSQL reads it: as the type of `NULL::<text>`; None unless exactly that."""
    tree = parse(f"SELECT NULL::{text}")
    stmts = tree.get("stmts", []) if tree else []
    select = stmts[0].get("stmt", {}).get("SelectStmt", {}) if len(stmts) == 1 else {}
    targets = select.get("targetList", [])
    if len(targets) != 1 or set(select) - {"targetList", "limitOption", "op"}:
        return None
    cast = targets[0].get("ResTarget", {}).get("val", {}).get("TypeCast", {})
    if not cast.get("arg", {}).get("A_Const", {}).get("isnull"):
        return None
    parts = names(cast.get("typeName", {}).get("names", []))
    if not parts:
        return None
    return (parts[-2] if len(parts) > 1 else None, parts[-1])

"""Reading pglast's JSON parse trees: one walker for the guard, the safety catalog and plans."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from pglast import parser


def parse(sql: str) -> dict[str, Any] | None:
    """The parse tree of `sql`, or None when it does not parse."""
    try:
        tree: dict[str, Any] = json.loads(parser.parse_sql_json(sql))
    except parser.ParseError:
        return None
    return tree


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

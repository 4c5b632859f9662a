"""Read a YAML file into plain JSON-like values, remembering the line of every mapping, list
and value, so that a problem can be reported at its line. PyYAML's safe loader (no Python
objects), with duplicate keys refused instead of silently keeping the last."""

from __future__ import annotations

import base64
import datetime as dt
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode


class Located(dict[str, Any]):
    """A mapping with its line and the lines of each key and value (1-based)."""

    def __init__(self) -> None:
        super().__init__()
        self.line = 0
        self.lines: dict[str, int] = {}
        self.keys_at: dict[str, int] = {}


class LocatedList(list[Any]):
    """A list with its line and the line of each item."""

    def __init__(self, items: Any = ()) -> None:
        super().__init__(items)
        self.line = 0
        self.lines: list[int] = []


class YamlProblem(Exception):
    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


def _line(node: Node) -> int:
    return int(node.start_mark.line) + 1


# libyaml's parser when PyYAML was built with it (the usual wheels): ~5x faster.
_Safe: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_Safe):  # type: ignore[valid-type,misc]
    def construct_located_mapping(self, node: MappingNode) -> Located:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                if key_node.value in seen:
                    raise YamlProblem(f"duplicate key '{key_node.value}'", _line(key_node))
                seen.add(key_node.value)
        self.flatten_mapping(node)  # merge keys (<<: *anchor)
        out = Located()
        out.line = _line(node)
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, str | int | float | bool):
                raise YamlProblem("a key must be a plain value", _line(key_node))
            out[str(key)] = _plain(self.construct_object(value_node, deep=True))
            out.lines[str(key)] = _line(value_node)
            out.keys_at[str(key)] = _line(key_node)
        return out

    def construct_located_list(self, node: SequenceNode) -> LocatedList:
        out = LocatedList(_plain(self.construct_object(n, deep=True)) for n in node.value)
        out.line = _line(node)
        out.lines = [_line(n) for n in node.value]
        return out


_Loader.add_constructor("tag:yaml.org,2002:map", _Loader.construct_located_mapping)
_Loader.add_constructor("tag:yaml.org,2002:seq", _Loader.construct_located_list)


def _plain(value: Any) -> Any:
    """YAML scalars without a JSON form as JSON text: an unquoted 2025-02-01 is a date in
    YAML, and !!binary is bytes."""
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value


def load(text: str) -> Any:
    """The document's value; raises YamlProblem with the line of a syntax error."""
    try:
        return yaml.load(text, Loader=_Loader)  # a SafeLoader: plain values only
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = int(mark.line) + 1 if mark is not None else 1
        raise YamlProblem(f"invalid YAML: {exc.problem or exc.context}", line) from None
    except yaml.YAMLError as exc:
        raise YamlProblem(f"invalid YAML: {exc}", 1) from None


def to_plain(value: Any) -> Any:
    """Located values as plain dicts and lists (for JSON Schema, tools/list, json.dumps)."""
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_plain(v) for v in value]
    return value

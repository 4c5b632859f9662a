"""PostgreSQL's text EXPLAIN format, written from its JSON format.

explain_query runs EXPLAIN once, in JSON (the warnings need its structure), and writes the text
plan from that document, so that EXPLAIN ANALYZE executes the statement once whatever format was
asked for. The layout follows PostgreSQL's explain.c: a line per node with its costs and actual
figures, then its details in the order PostgreSQL gives them (which is the JSON keys' order),
two properties per line where the text format combines them (sort method and memory, hash
buckets, buffers), and children indented under `->`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

_HEADER = {
    "Node Type", "Strategy", "Partial Mode", "Operation", "Parallel Aware", "Async Capable",
    "Join Type", "Relation Name", "Schema", "Alias", "Index Name", "Scan Direction",
    "Function Name", "CTE Name", "Tuplestore Name", "Startup Cost", "Total Cost", "Plan Rows",
    "Plan Width", "Actual Startup Time", "Actual Total Time", "Actual Rows", "Actual Loops",
    "Parent Relationship", "Subplan Name", "Plans", "Command", "Custom Plan Provider",
}  # fmt: skip
# Shown in text only when they say something.
_ONLY_IF_TRUE = {"Disabled", "Single Copy", "Inner Unique"}
_ONLY_IF_NONZERO = {
    "Planned Partitions", "Subplans Removed", "Rows Removed by Filter",
    "Rows Removed by Index Recheck", "Rows Removed by Join Filter", "Heap Fetches",
}  # fmt: skip
_ONLY_IF_VERBOSE = {"Inner Unique"}

_BUFFERS: dict[str, tuple[str, ...]] = {
    "shared": ("hit", "read", "dirtied", "written"),
    "local": ("hit", "read", "dirtied", "written"),
    "temp": ("read", "written"),
}
_BUFFER_KEYS = {
    f"{group.capitalize()} {part.capitalize()} Blocks"
    for group, parts in _BUFFERS.items()
    for part in parts
}
_IO_KEYS = {"I/O Read Time", "I/O Write Time"} | {
    f"{g} I/O {k} Time" for g in ("Shared", "Local", "Temp") for k in ("Read", "Write")
}
_PLAIN_NAME = re.compile(r"^[a-z_][a-z0-9_$]*$")


def _ident(name: str) -> str:
    return name if _PLAIN_NAME.match(name) else '"' + name.replace('"', '""') + '"'


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ", ".join(_value(v) for v in value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _name(node: dict[str, Any]) -> str:
    kind = str(node.get("Node Type", "?"))
    if kind == "Aggregate":
        kind = {"Sorted": "GroupAggregate", "Hashed": "HashAggregate"}.get(
            node.get("Strategy", ""), "MixedAggregate" if node.get("Strategy") == "Mixed" else kind
        )
        if node.get("Partial Mode") in ("Partial", "Finalize"):
            kind = f"{node['Partial Mode']} {kind}"
    elif kind == "SetOp":
        prefix = "HashSetOp" if node.get("Strategy") == "Hashed" else "SetOp"
        kind = f"{prefix} {node.get('Command', '')}".strip()
    elif kind in ("Nested Loop", "Hash Join", "Merge Join"):
        join = node.get("Join Type", "Inner")
        base = kind.removesuffix(" Join")
        if join != "Inner":
            kind = f"{base} {join} Join"
    elif kind == "Custom Scan" and node.get("Custom Plan Provider"):
        kind = f"Custom Scan ({node['Custom Plan Provider']})"
    if node.get("Scan Direction") == "Backward":
        kind += " Backward"
    if "Index Name" in node:
        kind += (" on " if kind.startswith("Bitmap Index") else " using ") + _ident(
            node["Index Name"]
        )
    target = node.get("Relation Name") or node.get("Function Name") or node.get("CTE Name")
    target = target or node.get("Tuplestore Name")
    alias = node.get("Alias")
    if target:
        schema = node.get("Schema")
        kind += " on " + (f"{_ident(schema)}." if schema else "") + _ident(target)
        if alias and alias != target:
            kind += " " + _ident(alias)
    elif alias:
        kind += " on " + _ident(alias)
    if node.get("Async Capable"):
        kind = "Async " + kind
    if node.get("Parallel Aware"):
        kind = "Parallel " + kind
    return kind


def _figures(node: dict[str, Any], rows_decimals: int) -> str:
    text = ""
    if "Total Cost" in node:
        text += (
            f"  (cost={node['Startup Cost']:.2f}..{node['Total Cost']:.2f}"
            f" rows={node['Plan Rows']:.0f} width={node['Plan Width']})"
        )
    if "Actual Loops" in node:
        if not node["Actual Loops"]:
            text += " (never executed)"
        else:
            text += (
                f" (actual time={node['Actual Startup Time']:.3f}.."
                f"{node['Actual Total Time']:.3f} rows={node['Actual Rows']:.{rows_decimals}f}"
                f" loops={node['Actual Loops']:.0f})"
            )
    return text


def _buffers(node: dict[str, Any]) -> str | None:
    groups = []
    for group, parts in _BUFFERS.items():
        keys = ((part, f"{group.capitalize()} {part.capitalize()} Blocks") for part in parts)
        shown = [f"{part}={node[key]}" for part, key in keys if node.get(key)]
        if shown:
            groups.append(f"{group} " + " ".join(shown))
    return "Buffers: " + ", ".join(groups) if groups else None


def _io(node: dict[str, Any]) -> str | None:
    parts = [f"{k.replace(' Time', '').lower()}={node[k]:.3f}" for k in _IO_KEYS if node.get(k)]
    return "I/O Timings: " + " ".join(sorted(parts)) if parts else None


def _details(node: dict[str, Any], verbose: bool) -> Iterator[str]:
    """The node's detail lines, in PostgreSQL's order, combined as its text format does."""
    done: set[str] = set()
    for key, value in node.items():
        if key in _HEADER or key in done or (key in _ONLY_IF_VERBOSE and not verbose):
            continue
        if key in _BUFFER_KEYS:
            done |= _BUFFER_KEYS
            line = _buffers(node)
        elif key in _IO_KEYS:
            done |= _IO_KEYS
            line = _io(node)
        elif key == "Sort Method":
            done |= {"Sort Space Used", "Sort Space Type"}
            line = f"Sort Method: {value}"
            if "Sort Space Type" in node:
                line += f"  {node['Sort Space Type']}: {node['Sort Space Used']}kB"
        elif key in ("Hash Buckets", "Original Hash Buckets", "Hash Batches"):
            done |= {"Hash Buckets", "Original Hash Buckets", "Hash Batches"}
            done |= {"Original Hash Batches", "Peak Memory Usage"}
            line = _hash_line(node)
        elif key == "HashAgg Batches":
            done |= {"Peak Memory Usage", "Disk Usage"}
            line = f"Batches: {value}  Memory Usage: {node.get('Peak Memory Usage', 0)}kB"
            if value > 1:
                line += f"  Disk Usage: {node.get('Disk Usage', 0)}kB"
        elif key in ("Cache Hits", "Cache Misses", "Cache Evictions", "Cache Overflows"):
            names = ("Hits", "Misses", "Evictions", "Overflows")
            done |= {f"Cache {n}" for n in names} | {"Peak Memory Usage"}
            line = "  ".join(f"{n}: {node.get('Cache ' + n, 0)}" for n in names)
            line += f"  Memory Usage: {node.get('Peak Memory Usage', 0)}kB"
        elif key in ("Exact Heap Blocks", "Lossy Heap Blocks"):
            done |= {"Exact Heap Blocks", "Lossy Heap Blocks"}
            blocks = [
                f"{k}={node[f'{k.capitalize()} Heap Blocks']}"
                for k in ("exact", "lossy")
                if node.get(f"{k.capitalize()} Heap Blocks")
            ]
            line = "Heap Blocks: " + " ".join(blocks) if blocks else None
        elif key == "Storage":
            done.add("Maximum Storage")
            line = f"Storage: {value}  Maximum Storage: {node.get('Maximum Storage', 0)}kB"
        elif key == "Workers":
            line = None
            for worker in value:
                number = worker.get("Worker Number", "?")
                yield f"Worker {number}:  " + "  ".join(
                    f"{k}: {_value(v)}" for k, v in worker.items() if k != "Worker Number"
                )
        elif key in _ONLY_IF_TRUE:
            line = f"{key}: true" if value else None
        elif key in _ONLY_IF_NONZERO:
            line = f"{key}: {_value(value)}" if value else None
        elif isinstance(value, dict):
            line = f"{key}: " + "  ".join(f"{k}: {_value(v)}" for k, v in value.items())
        else:
            line = f"{key}: {_value(value)}"
        done.add(key)
        if line is not None:
            yield line


def _hash_line(node: dict[str, Any]) -> str:
    def part(label: str, key: str) -> str:
        now, before = node.get(f"Hash {key}"), node.get(f"Original Hash {key}")
        return f"{label}: {now}" + (f" (originally {before})" if before not in (None, now) else "")

    return (
        f"{part('Buckets', 'Buckets')}  {part('Batches', 'Batches')}"
        f"  Memory Usage: {node.get('Peak Memory Usage', 0)}kB"
    )


def _node(node: dict[str, Any], indent: int, rows_decimals: int, verbose: bool) -> Iterator[str]:
    if node.get("Subplan Name"):
        yield " " * (2 * indent) + node["Subplan Name"]
        indent += 1
    prefix = ""
    if indent:
        prefix = " " * (2 * indent) + "->  "
        indent += 2
    yield prefix + _name(node) + _figures(node, rows_decimals)
    indent += 1
    for line in _details(node, verbose):
        yield " " * (2 * indent) + line
    for child in node.get("Plans", []):
        yield from _node(child, indent, rows_decimals, verbose)


def render(document: list[dict[str, Any]], server_version: int, *, verbose: bool) -> str:
    """The text form of an EXPLAIN (FORMAT JSON[, VERBOSE]) document from a server of this
    major version (18 shows actual rows with two decimals)."""
    decimals = 2 if server_version >= 18 else 0
    lines: list[str] = []
    for top in document:
        lines += _node(top["Plan"], 0, decimals, verbose)
        for key, value in top.items():
            if key == "Plan":
                continue
            if key == "Planning" and isinstance(value, dict):
                details = list(_details(value, verbose))
                if details:
                    lines += ["Planning:", *("  " + d for d in details)]
            elif key in ("Planning Time", "Execution Time"):
                lines.append(f"{key}: {value:.3f} ms")
            elif key == "Triggers":
                lines += [
                    f"Trigger {t.get('Trigger Name')}: time={t.get('Time', 0):.3f}"
                    f" calls={t.get('Calls', 0)}"
                    for t in value
                ]
            elif isinstance(value, dict):
                lines.append(f"{key}:")
                lines += [f"  {k}: {_value(v)}" for k, v in value.items()]
            else:
                lines.append(f"{key}: {_value(value)}")
    return "\n".join(lines)

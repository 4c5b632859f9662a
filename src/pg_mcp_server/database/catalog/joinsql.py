"""What find_join_path says about a path: a JOIN clause that runs as-is, and what each step
does to the number of rows.

Aliases are readable (album al, artist ar, film_category fc): initials, lengthened where two
tables of the path would get the same one. A table the search path finds is named without its
schema, as a person would write it; the rest are schema-qualified.
"""

from __future__ import annotations

import re
from collections import Counter

from pglast.keywords import COL_NAME_KEYWORDS, RESERVED_KEYWORDS, TYPE_FUNC_NAME_KEYWORDS

from pg_mcp_server.database.catalog.joinpaths import FanKey, Graph, Path, join_types

_KEYWORDS = RESERVED_KEYWORDS | TYPE_FUNC_NAME_KEYWORDS | COL_NAME_KEYWORDS
_PLAIN = re.compile(r"^[a-z_][a-z0-9_]*$")
_LONGEST = 3  # letters taken from a name's first word before falling back ...
_SHORT = 6  # ... to the name itself, when it is this short, or to numbers


def ident(name: str) -> str:
    """Quote only when needed, so examples stay readable and still run as-is."""
    if _PLAIN.match(name) and name not in _KEYWORDS:
        return name
    return '"' + name.replace('"', '""') + '"'


def aliases(tables: list[str]) -> list[str]:
    """One alias per table: the initials of its words (order_items oi), the first word's
    first letters growing (up to three) while two tables would share one, then the name
    itself when short (t500, t499), else a number."""
    words: list[list[str]] = [
        re.findall(r"[a-z]+", re.sub(r"([a-z])([A-Z])", r"\1_\2", t).lower()) or ["t"]
        for t in tables
    ]
    taken = [1] * len(tables)

    def alias(i: int) -> str:
        first, *rest = words[i]
        return first[: taken[i]] + "".join(w[0] for w in rest)

    current = [alias(i) for i in range(len(tables))]
    while True:
        counts = Counter(current)
        clashing = [i for i, a in enumerate(current) if counts[a] > 1 or a in _KEYWORDS]
        growing = [i for i in clashing if taken[i] < min(_LONGEST, len(words[i][0]))]
        if not growing:
            break
        for i in growing:
            taken[i] += 1
        current = [alias(i) for i in range(len(tables))]
    # Still alike (t500, t499; or the same table twice): a short name is its own alias.
    counts = Counter(current)
    current = [
        t if counts[a] > 1 and len(t) <= _SHORT and ident(t) == t else a
        for a, t in zip(current, tables, strict=True)
    ]
    used: set[str] = set()
    out = []
    for a in current:
        candidate, n = a, 1
        while candidate in used or candidate in _KEYWORDS:
            n += 1
            candidate = f"{a}{n}"
        used.add(candidate)
        out.append(candidate)
    return out


def join_sql(graph: Graph, start: int, start_name: tuple[str, str], path: Path) -> str:
    """`FROM a x JOIN b y ON ...` for the path, every column pair of composite keys joined:
    JOIN while every row is sure to match, LEFT JOIN from the first step that may not."""
    oids = [start, *(edge.end for edge in path)]
    names = [graph.names.get(oid, start_name) for oid in oids]
    short = aliases([table for _, table in names])

    def source(i: int) -> str:
        schema, table = names[i]
        qualified = "" if graph.visible.get(oids[i]) else f"{ident(schema)}."
        return f"{qualified}{ident(table)} {short[i]}"

    parts = [f"FROM {source(0)}"]
    for i, (edge, join) in enumerate(zip(path, join_types(path), strict=True), start=1):
        on = " AND ".join(
            f"{short[i - 1]}.{ident(a)} = {short[i]}.{ident(b)}"
            for a, b in zip(edge.start_columns, edge.end_columns, strict=True)
        )
        parts.append(f"{join.removeprefix('INNER ')} {source(i)} ON {on}")
    return " ".join(parts)


def fan_out_notes(
    graph: Graph, path: Path, ratios: dict[FanKey, float | None]
) -> tuple[list[str], str | None]:
    """The steps that can multiply rows, each with its measured ratio, and what they do to
    aggregates over the first table (None when nothing multiplies)."""
    notes: list[str] = []
    product: float | None = 1.0
    for edge in path:
        if not edge.multiplies:
            continue
        parent, child = graph.names[edge.start][1], graph.names[edge.end][1]
        ratio = ratios.get(edge.fan_key)
        if ratio is None:
            notes.append(f"{parent} -> {child}: one-to-many (no statistics)")
            product = None
        else:
            notes.append(f"{parent} -> {child}: {ratio:.3g} rows per {parent}")
            product = None if product is None else product * ratio
    if not notes or (product is not None and product < 1.005):
        return notes, None
    first = graph.names[path[0].start][1]
    times = "several times" if product is None else f"~{product:.3g}x"
    return notes, f"{first} rows repeat {times}, inflating sum/count: aggregate {first} first"

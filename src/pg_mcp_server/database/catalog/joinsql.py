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
from pg_mcp_server.database.catalog.keys import ForeignKey

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


# Orphans of a NOT VALID key are counted only on a referencing table of at most this many
# rows (the planner's estimate): the count reads the whole table. At most ORPHAN_CAP are
# counted.
ORPHAN_SCAN_ROWS = 2_000_000
ORPHAN_CAP = 100_000


def unchecked_keys(paths: list[Path]) -> list[ForeignKey]:
    """The NOT VALID keys the paths' steps use, each once."""
    keys = {e.key.constraint_name: e.key for p in paths for e in p if not e.key.validated}
    return list(keys.values())


def countable(key: ForeignKey) -> bool:
    return key.from_rows is not None and key.from_rows <= ORPHAN_SCAN_ROWS


def orphans_sql(keys: list[ForeignKey]) -> str:
    """One SELECT counting, for each key (all `countable`), the referencing rows whose key
    columns are all set and match no referenced row (what validating the key would
    reject), at most ORPHAN_CAP each: column k<i> for keys[i]. It goes through the same gate
    as a caller's query (rows.Reader.read)."""
    counts = []
    for i, key in enumerate(keys):
        child = f"{ident(key.from_schema)}.{ident(key.from_table)}"
        parent = f"{ident(key.to_schema)}.{ident(key.to_table)}"
        present = " AND ".join(f"c.{ident(a)} IS NOT NULL" for a in key.from_columns)
        match = " AND ".join(
            f"p.{ident(b)} = c.{ident(a)}"
            for a, b in zip(key.from_columns, key.to_columns, strict=True)
        )
        counts.append(
            f"(SELECT count(*) FROM (SELECT 1 FROM {child} c WHERE {present} AND NOT EXISTS "
            f"(SELECT 1 FROM {parent} p WHERE {match}) LIMIT {ORPHAN_CAP}) o) AS k{i}"
        )
    return "SELECT " + ", ".join(counts)


def unchecked_notes(graph: Graph, path: Path, orphans: dict[str, int | None]) -> list[str]:
    """A note per step over a NOT VALID key: what an inner join over it loses, how to keep
    it, and how many rows break the key (`orphans`: by constraint name; None or absent when
    not counted)."""
    notes = []
    for edge, join in zip(path, join_types(path), strict=True):
        key = edge.key
        if key.validated:
            continue
        child, parent = key.from_table, key.to_table
        count = orphans.get(key.constraint_name)
        if count is None:
            how_many = (
                f"some {child} rows may reference no {parent} (not counted: about "
                f"{key.from_rows} rows to read)"
                if key.from_rows is not None and not countable(key)
                else f"some {child} rows may reference no {parent} (not counted)"
            )
        elif count >= ORPHAN_CAP:
            how_many = f"at least {ORPHAN_CAP} {child} rows reference no {parent}"
        else:
            how_many = f"{count} {child} rows reference no {parent}"
        if edge.forward:
            keep = (
                f"the {join} here keeps them; an inner JOIN would drop them"
                if join == "LEFT JOIN"
                else "an inner JOIN drops them: use LEFT JOIN to keep them"
            )
        else:
            keep = f"a join from {parent} never reaches them: start from {child} to see them"
        notes.append(f"{key.constraint_name} is NOT VALID: {how_many}; {keep}")
    return notes

"""How a column's values become JSON, for every tool that returns rows (PRD 8.4).

PostgreSQL makes the JSON (`to_json`, see rewrite.py), so every type it can return has a form:
numbers and booleans as JSON, json/jsonb as themselves, arrays as lists, records, composites and
whole-row references as objects (anonymous records with keys f1, f2, ...), types with a cast to
json (hstore, PostGIS geometry) through it, and everything else (timestamps in ISO 8601,
intervals, ranges, geometric types, money, bit strings, tsvector, xml, types the server knows and
we do not) as PostgreSQL's text form in a JSON string. On top of `to_json`:

- numeric is a JSON number only while a double holds it exactly (else a string: JSON readers
  parse numbers as doubles), and NaN / Infinity are strings;
- bytea is base64 (`to_json` would give PostgreSQL's hex text);
- sensitive columns (database/rows/redaction.py) come back as "[REDACTED]" without their values
  leaving PostgreSQL;
- with `max_text` (get_sample_rows: MCP_MAX_VALUE_CHARS), a long text, bytea, json or array
  value is cut, marked with how long it was (`cut_marker`); numbers, booleans, dates and the
  like are never long and never cut.

Each column's expression is chosen once per statement from the type PostgreSQL reports.

Custom definitions' rows (custom/runner.py) come as the driver decoded them, not through that
wrapper (why: runner.fetch_rows), and `from_driver` makes those values JSON. The two agree on
integers, double precision, numerics (one that a double holds to 15 digits a number, one it
cannot hold a string, NaN and the infinities strings), booleans, text, bytea (base64), uuid,
json, dates, intervals (text on our connections), timestamps to the whole second (timestamptz
in a session whose TimeZone is UTC), and arrays and composites of those. They differ (compared
on every row of tests/test_values.py's table when jsonvalues.py was merged here) where the
driver's Python value is not PostgreSQL's text: numerics of 16 or 17 significant digits that a
double holds (4/3 as 1.3333333333333333: a number from the driver, a string from PostgreSQL,
whose cast to float8 and back keeps 15 digits), real (0.1 as 0.10000000149011612), fractions of
a second (`13:14:15.500000` for `13:14:15.5`), timetz's zone (`+02:00` for `+02`), timestamptz
ranges (ISO with `T`, unquoted), "char" (base64 of its byte), bit strings (their digits
without PostgreSQL's quoting), pg_lsn, oid, xid and xid8 (numbers for text), geometric types
(lists of coordinates for text; a path's open or closed form is not kept) and multiranges (lists
for text), hstore (its text for an object). A custom tool's output schema declares each of
these as the driver gives it (custom/build.py). Each side keeps the form it has always given:
execute_query's is the one documented (PRD 8.4, README), and a custom tool's callers parse what
it has given them.
"""

from __future__ import annotations

import base64
import datetime as dt
import math
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import asyncpg

REDACTED = "[REDACTED]"

# What replaces the end of a value that was cut, saying how long the whole value was: in
# characters of its text (for json and arrays, of its JSON text), or in bytes for bytea. ASCII
# only, so the SQL literal holding it is valid in a database of any encoding.
CUT_MARK = "...[cut: {length} {unit}]"
_CUT_TAIL = re.compile(r"\.\.\.\[cut: \d+ (?:chars|bytes)\]\Z")

_TEXTUAL = frozenset({"text", "varchar", "xml", "tsvector", "tsquery", "citext"})
# Values whose JSON may be long without being text: cut as their JSON text.
_STRUCTURED = frozenset({"json", "jsonb", "jsonpath", "hstore"})

# Readable names for the types the driver reports by their internal names.
_TYPE_NAMES = {
    "int2": "smallint",
    "int4": "integer",
    "int8": "bigint",
    "float4": "real",
    "float8": "double precision",
    "bool": "boolean",
    "bpchar": "character",
}


def type_name(typ: Any) -> str:
    """A readable, schema-qualified (outside pg_catalog) name for an asyncpg `Type`."""
    name: str = typ.name
    suffix = ""
    while name.endswith("[]"):  # asyncpg names arrays by their element: "int4[]"
        name, suffix = name[:-2], suffix + "[]"
    base = _TYPE_NAMES.get(name, name)
    schema = getattr(typ, "schema", None) or "pg_catalog"
    return (base if schema == "pg_catalog" else f"{schema}.{base}") + suffix


# pg_catalog types without an array type (pseudo-types, planner statistics types).
_NO_ARRAY = frozenset(
    [
        "_record",
        "any",
        "anyarray",
        "anycompatible",
        "anycompatiblearray",
        "anycompatiblemultirange",
        "anycompatiblenonarray",
        "anycompatiblerange",
        "anyelement",
        "anyenum",
        "anymultirange",
        "anynonarray",
        "anyrange",
        "event_trigger",
        "fdw_handler",
        "index_am_handler",
        "internal",
        "language_handler",
        "pg_brin_bloom_summary",
        "pg_brin_minmax_multi_summary",
        "pg_ddl_command",
        "pg_dependencies",
        "pg_mcv_list",
        "pg_ndistinct",
        "pg_node_tree",
        "table_am_handler",
        "trigger",
        "tsm_handler",
        "unknown",
        "void",
    ]
)


@dataclass(frozen=True)
class Column:
    name: str
    data_type: str  # as shown to the caller (type_name)
    base: str  # the driver's name for the type, "int4", "text[]", ...
    kind: str  # the driver's: scalar, array, composite, range, ...
    builtin: bool  # a pg_catalog type
    redacted: bool = False

    @property
    def typed(self) -> bool:
        """Whether the wrapper can carry a NULL of this type (through array_agg), so that
        PostgreSQL notices when the column's type changes (see rewrite.py): not for composites
        (nor arrays that may be of composites), which the driver would have to describe, nor
        types without arrays."""
        if self.kind == "composite" or (self.kind == "array" and not self.builtin):
            return False
        return not (self.builtin and self.base in _NO_ARRAY)


def _json(expr: str) -> str:
    return f"pg_catalog.to_json({expr})::pg_catalog.text"


def cut_marker(length: int, unit: str = "chars") -> str:
    """The mark ending a value cut from `length` characters (or bytes, for bytea):
    "...[cut: 2000 chars]". Every tool marks cut values with this, in Python or (through
    `cut_marker_sql`) in PostgreSQL."""
    return CUT_MARK.format(length=length, unit=unit)


def cut_marker_sql(length: str, unit: str = "chars") -> str:
    """`cut_marker` as SQL, for a `length` that is an SQL expression of type integer."""
    template = CUT_MARK.format(length="%s", unit=unit).replace("'", "''")
    return f"pg_catalog.format('{template}', {length})"


def cut_text(value: str, max_chars: int) -> str:
    """`value` cut after `max_chars` characters and marked, if it is longer."""
    if len(value) <= max_chars:
        return value
    return value[:max_chars] + cut_marker(len(value))


def _cut(text: str, max_text: int) -> str:
    """`text` (an expression of type text) as JSON, cut after `max_text` characters and marked
    (octet_length first: it needs no detoasting)."""
    marked = (
        f"pg_catalog.left({text}, {max_text}) || {cut_marker_sql(f'pg_catalog.length({text})')}"
    )
    return (
        f"CASE WHEN pg_catalog.octet_length({text}) <= {max_text} THEN {_json(text)} "
        f"WHEN pg_catalog.length({text}) > {max_text} "
        f"THEN {_json(marked)} ELSE {_json(text)} END"
    )


def _cut_json(ref: str, max_text: int) -> str:
    """`ref` as JSON; when that JSON text is longer than `max_text` characters, its first
    `max_text` characters, marked, as a JSON string instead (made once, in a subquery)."""
    marked = f"pg_catalog.left(j.t, {max_text}) || {cut_marker_sql('pg_catalog.length(j.t)')}"
    return (
        f"(SELECT CASE WHEN pg_catalog.length(j.t) > {max_text} THEN {_json(marked)} "
        f"ELSE j.t END FROM (SELECT {_json(ref)} AS t) AS j)"
    )


def _base64(ref: str) -> str:
    return f"pg_catalog.replace(pg_catalog.encode({ref}, 'base64'), E'\\n', '')"


def cell(column: Column, ref: str, *, max_text: int | None = None) -> str:
    """The SQL expression turning `ref` (a column of `column`'s type) into its JSON text."""
    if column.redacted:
        return f"CASE WHEN {ref} IS NULL THEN NULL ELSE '\"{REDACTED}\"' END"
    if column.builtin and column.base == "bytea":
        if not max_text:
            return _json(_base64(ref))
        # Cut the bytes, then encode what is left: base64 of max_text characters at most.
        keep = max_text * 3 // 4
        marker = cut_marker_sql(f"pg_catalog.octet_length({ref})", "bytes")
        cut = f"{_base64(f'pg_catalog.substring({ref}, 1, {keep})')} || {marker}"
        return (
            f"CASE WHEN pg_catalog.octet_length({ref}) > {keep} THEN {_json(cut)} "
            f"ELSE {_json(_base64(ref))} END"
        )
    if column.builtin and column.base == "numeric":
        # abs(NaN) and the infinities sort above 1e300; the cast to double would overflow there.
        return (
            f"CASE WHEN pg_catalog.abs({ref}) >= 1e300 THEN {_json(f'{ref}::pg_catalog.text')} "
            f"WHEN {ref} = {ref}::pg_catalog.float8::pg_catalog.numeric THEN {_json(ref)} "
            f"ELSE {_json(f'{ref}::pg_catalog.text')} END"
        )
    if max_text and column.base in _TEXTUAL:
        return _cut(ref if column.base == "text" else f"({ref})::pg_catalog.text", max_text)
    if max_text and (
        column.base in _STRUCTURED or column.kind in ("array", "composite") or not column.builtin
    ):
        return _cut_json(ref, max_text)
    return _json(ref)


def cells(columns: Sequence[Column], *, max_text: int | None = None) -> Callable[[int], str]:
    """`cell` for the wrapper's column i (1-based, `s.c<i>`)."""
    return lambda i: cell(columns[i - 1], f"s.c{i}", max_text=max_text)


def columns_of(attributes: Sequence[Any], redacted: Sequence[bool]) -> tuple[Column, ...]:
    """Columns from a prepared statement's asyncpg `Attribute`s, redacted where
    `redacted` (database/rows/redaction.py) says so."""
    return tuple(
        Column(
            name=a.name,
            data_type=type_name(a.type),
            base=a.type.name,
            kind=a.type.kind,
            builtin=(getattr(a.type, "schema", None) or "pg_catalog") == "pg_catalog",
            redacted=r,
        )
        for a, r in zip(attributes, redacted, strict=True)
    )


def redacted_names(columns: Sequence[Column], rows: Sequence[Sequence[Any]]) -> list[str]:
    """The sensitive columns that held a value in these rows (NULL is not worth redacting)."""
    return [
        c.name for i, c in enumerate(columns) if c.redacted and any(r[i] is not None for r in rows)
    ]


def is_cut(value: Any) -> bool:
    """Whether `value` ends with a cut mark."""
    return isinstance(value, str) and _CUT_TAIL.search(value) is not None


def any_cut(rows: Sequence[Sequence[Any]]) -> bool:
    return any(is_cut(v) for row in rows for v in row)


_INFINITE = {
    dt.date.max: "infinity",
    dt.date.min: "-infinity",
    dt.datetime.max: "infinity",
    dt.datetime.min: "-infinity",
}


def _float(value: float) -> Any:
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def _decimal(value: Decimal) -> Any:
    as_float = float(value)
    if not value.is_finite():
        return _float(as_float)
    # A float only when it reads back as the same decimal, so no digit is lost.
    return as_float if Decimal(repr(as_float)) == value else str(value)


def _range(value: asyncpg.Range) -> str:
    if value.isempty:
        return "empty"
    lower = "" if value.lower is None else from_driver(value.lower)
    upper = "" if value.upper is None else from_driver(value.upper)
    return f"{'[' if value.lower_inc else '('}{lower},{upper}{']' if value.upper_inc else ')'}"


def from_driver(value: Any) -> Any:
    """A JSON-serialisable equivalent of one value as the driver decoded it."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, Decimal):
        return _decimal(value)
    if isinstance(value, dt.datetime | dt.date):
        if value in _INFINITE:
            return _INFINITE[value]
        return value.isoformat()
    if isinstance(value, dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, list | tuple):
        return [from_driver(v) for v in value]
    if isinstance(value, dict):
        return {str(k): from_driver(v) for k, v in value.items()}
    if isinstance(value, asyncpg.Record):
        return {k: from_driver(v) for k, v in value.items()}
    if isinstance(value, asyncpg.Range):
        return _range(value)
    if isinstance(value, asyncpg.BitString):
        return value.as_string()
    if isinstance(value, asyncpg.Path):  # and Polygon: its points (a path's open or
        return [from_driver(point) for point in value.points]  # closed form is not kept)
    return str(value)

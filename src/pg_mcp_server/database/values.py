"""Turn driver values into JSON-safe ones without losing meaning (PRD 8.4).

numeric stays a JSON number while a float holds it exactly (else a string); NaN and the
infinities become strings; bytea becomes base64; timestamps ISO 8601; anything else that has
no JSON form (ranges, network types, geometric types) its PostgreSQL text form.
"""

from __future__ import annotations

import base64
import datetime as dt
import math
import re
import uuid
from decimal import Decimal
from typing import Any

import asyncpg

REDACTED = "[REDACTED]"

_INFINITE = {
    dt.date.max: "infinity",
    dt.date.min: "-infinity",
    dt.datetime.max: "infinity",
    dt.datetime.min: "-infinity",
}


def _decimal(value: Decimal) -> Any:
    if not value.is_finite():
        return "NaN" if value.is_nan() else ("Infinity" if value > 0 else "-Infinity")
    as_float = float(value)
    # A float only when it reads back as the same decimal, so no digit is lost.
    return as_float if Decimal(repr(as_float)) == value else str(value)


def _range(value: asyncpg.Range) -> str:
    if value.isempty:
        return "empty"
    lower = "" if value.lower is None else to_json(value.lower)
    upper = "" if value.upper is None else to_json(value.upper)
    return f"{'[' if value.lower_inc else '('}{lower},{upper}{']' if value.upper_inc else ')'}"


def to_json(value: Any) -> Any:
    """A JSON-serialisable equivalent of one column value."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
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
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, asyncpg.Record):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, asyncpg.Range):
        return _range(value)
    return str(value)


def identity(value: Any) -> Any:
    return value


# Types whose driver values are already JSON-safe (json/jsonb are decoded from JSON text).
_AS_IS = frozenset(
    {
        "int2",
        "int4",
        "int8",
        "oid",
        "text",
        "varchar",
        "bpchar",
        "name",
        "char",
        "bool",
        "json",
        "jsonb",
        "citext",
        "interval",
        "money",
        "xml",
    }
)


def _temporal(value: Any) -> Any:
    # Only the infinities map to the extremes the driver uses for them.
    if 1 < value.year < 9999:
        return value.isoformat()
    return _INFINITE.get(value, value.isoformat())


_CONVERTERS = {
    "timestamptz": _temporal,
    "timestamp": _temporal,
    "date": _temporal,
    "numeric": _decimal,
}


def converter_for(type_name: str, kind: str) -> Any:
    """The conversion for every value of a column of this type, chosen once per column."""
    if kind != "scalar":
        return to_json
    if type_name in _AS_IS:
        return identity
    return _CONVERTERS.get(type_name, to_json)


def row_to_json(
    record: asyncpg.Record,
    sensitive: re.Pattern[str] | None,
    max_text: int | None = None,
    keys: list[str] | None = None,
) -> tuple[dict[str, Any], set[str], bool]:
    """One row as a dict (under `keys`, by position, when column names repeat); returns it with
    the names of redacted columns and whether any value was cut to `max_text` characters."""
    out: dict[str, Any] = {}
    redacted: set[str] = set()
    cut = False
    pairs = zip(keys, record.values(), strict=True) if keys is not None else record.items()
    for name, raw in pairs:
        if sensitive is not None and raw is not None and sensitive.search(name):
            out[name] = REDACTED
            redacted.add(name)
            continue
        value = to_json(raw)
        if max_text is not None and isinstance(value, str) and len(value) > max_text:
            value = value[:max_text] + f"... [{len(value) - max_text} more characters]"
            cut = True
        out[name] = value
    return out, redacted, cut

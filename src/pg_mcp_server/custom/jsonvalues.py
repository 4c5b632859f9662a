"""Driver values of custom definitions as JSON, without losing meaning.

The built-in tools have PostgreSQL make each row's JSON around a SELECT (database/rows/values.py);
a definition's SQL may also be a write with RETURNING, a DO block's result or a completion
query, which that wrapper cannot carry, so these values are converted here, as the driver
returns them: numeric stays a JSON number while a float holds it exactly (else a string); NaN
and the infinities become strings; bytea becomes base64; timestamps ISO 8601; anything else
that has no JSON form (ranges, network types, geometric types) its PostgreSQL text form.
"""

from __future__ import annotations

import base64
import datetime as dt
import math
import uuid
from decimal import Decimal
from typing import Any

import asyncpg

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

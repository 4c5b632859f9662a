"""Bind `$n` parameters: JSON values checked and converted to the types PostgreSQL inferred.

Agents send JSON, so a date arrives as a string and a bigint may arrive as a string; the
prepared statement tells us what each `$n` must be, and each value is converted to what the
driver expects for that type (or refused with a PARAMETER_ERROR naming the parameter). Values
are always bound, never spliced into the SQL text.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
import uuid
from collections.abc import Callable, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from pg_mcp_server.errors import ParameterError


class _Refused(ValueError):
    pass


def _int(v: Any) -> int:
    if isinstance(v, bool):
        raise _Refused("a boolean is not an integer")
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str) and v.strip().lstrip("+-").isdigit():
        return int(v)
    raise _Refused("expected an integer")


def _float(v: Any) -> float:
    if isinstance(v, bool):
        raise _Refused("a boolean is not a number")
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            pass
    raise _Refused("expected a number")


def _numeric(v: Any) -> Decimal:
    if isinstance(v, bool):
        raise _Refused("a boolean is not a number")
    if isinstance(v, int | float | str):
        try:
            return Decimal(str(v).strip())
        except InvalidOperation:
            pass
    raise _Refused("expected a number (or a numeric string)")


def _bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in {"true", "t", "yes", "on", "1"}:
        return True
    if isinstance(v, str) and v.strip().lower() in {"false", "f", "no", "off", "0"}:
        return False
    raise _Refused("expected true or false")


def _text(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, bool | int | float):
        return json.dumps(v)
    raise _Refused("expected a string")


def _iso(parse: Callable[[str], Any], what: str) -> Callable[[Any], Any]:
    def convert(v: Any) -> Any:
        if isinstance(v, str):
            try:
                return parse(v.strip())
            except ValueError:
                pass
        raise _Refused(f"expected an ISO 8601 {what} string")

    return convert


def _timestamptz(v: str) -> dt.datetime:
    value = dt.datetime.fromisoformat(v)
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def _uuid(v: Any) -> uuid.UUID:
    if isinstance(v, str):
        try:
            return uuid.UUID(v)
        except ValueError:
            pass
    raise _Refused("expected a UUID string")


def _json(v: Any) -> str:
    if isinstance(v, str):
        try:
            json.loads(v)
            return v  # already JSON text
        except ValueError:
            return json.dumps(v)  # a plain string becomes a JSON string
    return json.dumps(v)


def _bytea(v: Any) -> bytes:
    if isinstance(v, str):
        try:
            return base64.b64decode(v, validate=True)
        except ValueError:
            pass
    raise _Refused("expected base64 text (bytea values are base64, as in results)")


def _inet(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return ipaddress.ip_interface(v.strip())
        except ValueError:
            pass
    raise _Refused("expected an IP address")


def _cidr(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return ipaddress.ip_network(v.strip())
        except ValueError:
            pass
    raise _Refused("expected a network such as 10.0.0.0/8")


CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "int2": _int,
    "int4": _int,
    "int8": _int,
    "oid": _int,
    "float4": _float,
    "float8": _float,
    "numeric": _numeric,
    "bool": _bool,
    "text": _text,
    "varchar": _text,
    "bpchar": _text,
    "name": _text,
    "char": _text,
    "citext": _text,
    "interval": _text,  # the connection sends interval as PostgreSQL text
    "date": _iso(dt.date.fromisoformat, "date"),
    "timestamp": _iso(dt.datetime.fromisoformat, "timestamp"),
    "timestamptz": _iso(_timestamptz, "timestamp"),
    "time": _iso(dt.time.fromisoformat, "time"),
    "uuid": _uuid,
    "json": _json,
    "jsonb": _json,
    "bytea": _bytea,
    "inet": _inet,
    "cidr": _cidr,
}


def _convert(value: Any, type_name: str, kind: str) -> Any:
    if value is None:
        return None
    if kind == "array" or type_name.endswith("[]"):
        if not isinstance(value, list):
            raise _Refused("expected a list (the parameter is an array)")
        element = type_name.removesuffix("[]")  # asyncpg names arrays "int4[]"
        return [_convert(v, element, "scalar") for v in value]
    convert = CONVERTERS.get(type_name)
    if convert is not None:
        return convert(value)
    if kind == "composite" or isinstance(value, dict | list):
        raise _Refused(f"values of type {type_name} cannot be passed from JSON; cast text instead")
    # Enums, domains over text and other text-like types: PostgreSQL parses the string.
    return _text(value)


def bind(params: Sequence[Any] | None, types: Sequence[Any]) -> list[Any]:
    """Driver-ready values for the statement's parameters (asyncpg `Type`s in `types`)."""
    given = list(params or [])
    if len(given) != len(types):
        raise ParameterError(
            f"The query has {len(types)} parameter(s) ($1..${len(types)}) but "
            f"{len(given)} value(s) were given.",
            suggestion=(
                "Pass exactly one value per $n placeholder, in order, in `params`."
                if types
                else "The query has no $n placeholders: omit `params`."
            ),
            context={"expected": len(types), "received": len(given)},
        )
    bound = []
    for n, (value, typ) in enumerate(zip(given, types, strict=True), start=1):
        try:
            bound.append(_convert(value, typ.name, typ.kind))
        except _Refused as exc:
            raise ParameterError(
                f"Parameter ${n} must be {typ.name}: {exc}.",
                suggestion=f"Pass ${n} as a JSON value of type {typ.name}, or cast in SQL.",
                context={"parameter": f"${n}", "expected_type": typ.name, "received": value},
            ) from None
    return bound

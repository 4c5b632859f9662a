"""Compact JSON Schemas for tools/list: same meaning, fewer tokens, cheaper to validate.

pydantic emits `$defs`/`$ref`, a `title` on every property and `anyOf: [X, null]` for optional
fields. Clients read these schemas on every session (LLM context) and some validate every
result against them, so we inline references, drop titles and write nullables as
`type: [X, "null"]`.
"""

from __future__ import annotations

from typing import Any

_NULL = {"type": "null"}


def compact_schema(schema: dict[str, Any]) -> dict[str, Any]:
    defs = schema.get("$defs", {})

    def node(s: Any) -> Any:
        if not isinstance(s, dict):
            return s
        if "$ref" in s:
            target = defs[s["$ref"].rsplit("/", 1)[-1]]
            return node({**target, **{k: v for k, v in s.items() if k != "$ref"}})
        out: dict[str, Any] = {}
        for key, value in s.items():
            if key in ("title", "$defs"):
                continue
            if key == "properties":
                out[key] = {name: node(sub) for name, sub in value.items()}
            elif key in ("items", "additionalProperties", "not"):
                out[key] = node(value)
            elif key in ("anyOf", "oneOf", "allOf", "prefixItems"):
                out[key] = [node(sub) for sub in value]
            else:
                out[key] = value
        options = out.get("anyOf")
        if isinstance(options, list) and len(options) == 2 and _NULL in options:
            other = options[0] if options[1] == _NULL else options[1]
            if isinstance(other.get("type"), str) and "anyOf" not in other:
                del out["anyOf"]
                out = {**other, **out, "type": [other["type"], "null"]}
        return out

    result = node(schema)
    assert isinstance(result, dict)
    return result

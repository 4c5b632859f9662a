"""Compact JSON Schemas for tools/list: same meaning, fewer tokens, cheaper to validate.

pydantic emits `$defs`/`$ref` and a `title` on every property. Clients read these schemas on
every session (LLM context) and some validate every result against them, so references are
inlined and titles dropped. Nullables stay `anyOf: [X, {"type": "null"}]`: the shorter
`type: [X, "null"]` is legal but not portable (single-type dialects such as the OpenAPI subset
behind Gemini function declarations reject it; MCP Inspector's --strict flags it).
"""

from __future__ import annotations

from typing import Any


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
        return out

    result = node(schema)
    assert isinstance(result, dict)
    return result

"""Compact JSON Schemas for tools/list: same meaning, fewer tokens, cheaper to validate.

Clients read these schemas on every session (LLM context) and validate every result against
them, so pydantic's `$defs`/`$ref` are inlined and its `title` on every property goes. Input
schemas keep each parameter's description (a model needs them to call), but not a `"default":
null`, which an optional parameter has anyway. Output schemas describe
the answer's top level only, each key with its type, whether it is required, and its default,
without prose; nested objects are just objects, lists of them just arrays (the tool
description names their keys). That keeps all the tools within a 12 KB tools/list, and
validation cheap.

Nullables stay `anyOf: [X, {"type": "null"}]`: the shorter `type: [X, "null"]` is legal but not
portable (single-type dialects such as the OpenAPI subset behind Gemini function declarations
reject it; MCP Inspector's --strict flags it). For answers that leave out every field at its
default (`models.compact.Compact`), a field whose default is null is never sent as null, so it
is advertised as plain `X`, without `"default": null`.
"""

from __future__ import annotations

from typing import Any


def compact_schema(
    schema: dict[str, Any], *, output: bool = False, omits_defaults: bool = False
) -> dict[str, Any]:
    """`output`: an output schema (top level only, no prose). `omits_defaults`: the answers
    leave out fields at their default (see above)."""
    defs = schema.get("$defs", {})

    def defs_of(s: Any) -> dict[str, Any]:
        """`s` with its reference (if it is one) resolved."""
        if isinstance(s, dict) and "$ref" in s:
            resolved: dict[str, Any] = defs[s["$ref"].rsplit("/", 1)[-1]]
            return resolved
        return s if isinstance(s, dict) else {}

    def node(s: Any, depth: int) -> Any:
        if not isinstance(s, dict):
            return s
        if omits_defaults and s.get("default", 0) is None:
            s = _without_null(s)
        elif not output and s.get("default", 0) is None:
            # An optional parameter is null unless given: the schema need not say so.
            s = {k: v for k, v in s.items() if k != "default"}
        if "$ref" in s:
            target = defs[s["$ref"].rsplit("/", 1)[-1]]
            return node({**target, **{k: v for k, v in s.items() if k != "$ref"}}, depth)
        if output and depth > 0 and "properties" in s:
            return {"type": "object"}
        if output and depth > 0 and "properties" in defs_of(s.get("items")):
            return {k: v for k, v in s.items() if k not in ("items", "title", "description")}
        out: dict[str, Any] = {}
        for key, value in s.items():
            if key in ("title", "$defs") or (key == "description" and output):
                continue
            if key == "properties":
                out[key] = {name: node(sub, depth + 1) for name, sub in value.items()}
            elif key in ("items", "additionalProperties", "not"):
                out[key] = node(value, depth)
            elif key in ("anyOf", "oneOf", "allOf", "prefixItems"):
                out[key] = [node(sub, depth) for sub in value]
            else:
                out[key] = value
        return out

    result = node(schema, 0)
    assert isinstance(result, dict)
    return result


def _without_null(s: dict[str, Any]) -> dict[str, Any]:
    """`s` (a property whose default is null) as the one non-null type it has, if it has one."""
    rest = {k: v for k, v in s.items() if k not in ("default", "anyOf")}
    branches = [b for b in s.get("anyOf", []) if b != {"type": "null"}]
    if len(branches) != 1:
        return {k: v for k, v in s.items() if k != "default"}
    return {**branches[0], **rest}

"""PRD 6.3 output models for the Layer 3 (query) tools; additive fields are marked.

No docstrings or field descriptions here: these models become the tools' outputSchemas, which
clients read with tools/list and validate every result against (the tool descriptions say what
each field holds). Validation cost grows with every schema node a value meets: for 100 film
rows, pydantic's schema for list[list[Any]] cost a Python client 14 ms per result (jsonschema
descends into each of the 1,400 values), a bare array 0.04 ms.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, WithJsonSchema

_ARRAY = WithJsonSchema({"type": "array"})


class QueryColumn(BaseModel):
    name: str
    data_type: str


class ExecuteQueryOutput(BaseModel):
    # PRD 6.3.1, with rows as arrays in the order of `columns` (a header, then values only:
    # the same facts in far fewer bytes than an object per row)
    columns: Annotated[list[QueryColumn], _ARRAY]
    rows: Annotated[list[list[Any]], _ARRAY]
    row_count: int
    has_more: bool
    execution_time_ms: float
    query_hash: str
    # additive, present only when there is something to say
    note: str = ""
    # additive, when the result is held and paged: its rows in all, and the next page's cursor
    total_rows: int = 0
    next_cursor: str = ""


class ExplainQueryOutput(BaseModel):
    # PRD 6.3.2; `plan` is text or YAML (a string) or PostgreSQL's JSON plan (a list)
    plan: str | dict[str, Any] | list[Any]
    format: str
    estimated_cost: float | None
    estimated_rows: int | None
    actual_time_ms: float | None
    warnings: list[str] | None

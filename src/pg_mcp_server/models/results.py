"""PRD 6.3 output models for the Layer 3 (query) tools; additive fields are marked."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

# No docstrings or field descriptions on the execute_query models: they become the tool's
# outputSchema, which clients read and validate every result against (the tool description
# says what each field means).


class QueryColumn(BaseModel):
    name: str
    data_type: str


class ExecuteQueryOutput(BaseModel):
    # PRD 6.3.1, with rows as arrays in the order of `columns` (a header, then values only:
    # the same facts in far fewer bytes than an object per row)
    columns: list[QueryColumn]
    rows: list[list[Any]]
    row_count: int
    has_more: bool
    execution_time_ms: float
    query_hash: str
    # additive, present only when there is something to say
    note: str = ""


class ExplainQueryOutput(BaseModel):
    """Output for explain_query tool."""

    plan: str | dict[str, Any] | list[Any] = Field(description="Query execution plan")
    format: str
    estimated_cost: float | None = Field(description="Total estimated cost")
    estimated_rows: int | None = Field(description="Estimated rows returned")
    actual_time_ms: float | None = Field(description="Actual execution time (if analyze=true)")
    warnings: list[str] | None = Field(description="Potential performance issues detected")

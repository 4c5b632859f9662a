"""PRD 6.3 output models for the Layer 3 (query) tools; additive fields are marked."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class QueryColumn(BaseModel):
    """Metadata about a result column."""

    name: str
    data_type: str


class ExecuteQueryOutput(BaseModel):
    """Output for execute_query tool."""

    columns: list[QueryColumn]
    rows: list[dict[str, Any]]
    row_count: int
    has_more: bool = Field(description="Whether results were truncated by limit")
    execution_time_ms: float
    query_hash: str = Field(description="Hash of executed query for reference")
    # additive
    note: str | None = Field(
        default=None,
        description="Why rows were cut (row limit or size limit), renamed duplicate columns, "
        "redactions",
    )


class ExplainQueryOutput(BaseModel):
    """Output for explain_query tool."""

    plan: str | dict[str, Any] | list[Any] = Field(description="Query execution plan")
    format: str
    estimated_cost: float | None = Field(description="Total estimated cost")
    estimated_rows: int | None = Field(description="Estimated rows returned")
    actual_time_ms: float | None = Field(description="Actual execution time (if analyze=true)")
    warnings: list[str] | None = Field(description="Potential performance issues detected")

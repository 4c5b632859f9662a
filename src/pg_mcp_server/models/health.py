"""Output models of analyze_db_health and get_top_queries.

As in models/results.py: no field descriptions (the tool descriptions say what each holds),
and the lists are bare arrays in the output schema, so that a client validating every answer
meets a handful of schema nodes, not one per finding.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, WithJsonSchema

from pg_mcp_server.models.compact import Compact

_ARRAY = WithJsonSchema({"type": "array"})
_OBJECT = WithJsonSchema({"type": "object"})


class Finding(Compact):
    check: str
    severity: str
    object: str
    numbers: dict[str, Any]
    fix: str = ""


class CheckResult(Compact):
    check: str
    status: str  # ok, findings, failed
    found: int = 0
    omitted: int = 0  # findings found but not shown (PER_CHECK, then the answer budget)
    note: str = ""
    error: str = ""


class AnalyzeDbHealthOutput(Compact):
    findings: Annotated[list[Finding], _ARRAY]
    checks: Annotated[list[CheckResult], _ARRAY]
    severities: Annotated[dict[str, int], _OBJECT]
    omitted: int = 0


class GetTopQueriesOutput(Compact):
    queries: Annotated[list[dict[str, Any]], _ARRAY]
    sort_by: str
    total_count: int
    extension_version: str
    note: str = ""


class AnalyzeQueryIndexesOutput(Compact):
    cost: float
    candidates: int
    recommendations: Annotated[list[dict[str, Any]], _ARRAY]
    hypopg_version: str
    # a workload's: its cost with the recommended indexes, and each statement's costs
    cost_after: float | None = None
    queries: Annotated[list[dict[str, Any]], _ARRAY] = Field(default_factory=list)
    note: str = ""

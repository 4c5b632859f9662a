"""PRD 7.1: the structured error every tool returns on failure."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class ErrorDetail(BaseModel):
    """Detailed error information."""

    code: str = Field(description="Machine-readable error code")
    message: str = Field(description="Human-readable error message")
    suggestion: str | None = Field(description="Actionable suggestion to resolve the error")
    context: dict[str, Any] | None = Field(description="Additional context for debugging")


class ErrorResponse(BaseModel):
    """Standard error response for tool failures (the PRD calls it ToolError; renamed so it
    cannot be taken for the SDK's ToolError exception)."""

    error: ErrorDetail
    tool_name: str
    input_received: dict[str, Any] | None

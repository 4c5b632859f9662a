"""The one place tool results and tool errors are made.

Every tool (built-in now, YAML-defined later) is registered as a `PgTool`. Its `run` turns
argument-validation failures into PARAMETER_ERROR, our typed `PgMcpError`s into their PRD
codes, and anything unexpected into a masked INTERNAL_ERROR (details go to the log on stderr,
never to the client). Successful results carry the output model twice, as the spec asks:
`structuredContent`, and compact JSON text for clients that read only `content`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ValidationError

from pg_mcp_server.errors import InternalError, ParameterError, PgMcpError
from pg_mcp_server.models.compact import Compact
from pg_mcp_server.models.errors import ErrorDetail, ErrorResponse
from pg_mcp_server.tools.schemas import compact_schema

logger = logging.getLogger(__name__)

_ECHO_LIMIT = 2000  # characters of each string argument echoed back in input_received

READ_ONLY = ToolAnnotations(
    read_only_hint=True,
    destructive_hint=False,
    idempotent_hint=True,
    open_world_hint=False,
)


def ok(output: BaseModel) -> CallToolResult:
    """The answer as structured content and the same compact JSON as text (a `Compact` model
    leaves out its fields at their default)."""
    structured = output.dump() if isinstance(output, Compact) else output.model_dump(mode="json")
    return ok_json(structured)


def ok_json(structured: dict[str, Any], encoded: dict[str, str] | None = None) -> CallToolResult:
    """For large results already made of JSON values (query rows): one encoding instead of a
    model's validate, dump and dump-to-JSON. `encoded` holds JSON text already made for some
    keys (the rows, encoded once for the size cap), used as is. The SDK still checks the
    result against the tool's output schema."""
    encoded = encoded or {}
    members = (f"{_dumps(k)}:{encoded.get(k) or _dumps(v)}" for k, v in structured.items())
    text = "{" + ",".join(members) + "}"
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=structured
    )


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _echo(arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        k: (v[:_ECHO_LIMIT] + "..." if isinstance(v, str) and len(v) > _ECHO_LIMIT else v)
        for k, v in arguments.items()
    }


def parameter_error(exc: ValidationError) -> ParameterError:
    problems = [
        {
            "parameter": ".".join(str(p) for p in err["loc"]) or "(arguments)",
            "problem": err["msg"],
            "received": err.get("input"),
        }
        for err in exc.errors(include_url=False)
    ]
    first = problems[0]
    return ParameterError(
        f"Invalid value for '{first['parameter']}': {first['problem']}",
        suggestion="Fix the listed parameters; the tool's input schema gives each constraint.",
        context={"errors": problems},
    )


def error_result(exc: PgMcpError, tool_name: str, arguments: dict[str, Any]) -> CallToolResult:
    body = ErrorResponse(
        error=ErrorDetail(
            code=exc.code,
            message=exc.message,
            suggestion=exc.suggestion,
            context=exc.context,
        ),
        tool_name=tool_name,
        input_received=_echo(arguments),
    )
    return CallToolResult(
        content=[TextContent(type="text", text=body.model_dump_json())],
        structured_content=body.model_dump(mode="json"),
        is_error=True,
    )


class PgTool(Tool):
    """An SDK tool whose failures come back as PRD error results (`ErrorResponse`)."""

    async def run(
        self,
        arguments: dict[str, Any],
        context: Context[Any, Any],
        convert_result: bool = False,
    ) -> Any:
        try:
            return await super().run(arguments, context, convert_result)
        except ToolError as wrapped:
            cause = wrapped.__cause__
            if isinstance(cause, ValidationError):
                error: PgMcpError = parameter_error(cause)
            elif isinstance(cause, PgMcpError):
                error = cause
            else:
                logger.error("tool %s failed unexpectedly", self.name, exc_info=cause)
                error = InternalError(f"The tool {self.name} failed unexpectedly.")
            logger.info("tool %s -> %s", self.name, error.code)
            return error_result(error, self.name, arguments)


def make_tool(
    fn: Callable[..., Any],
    *,
    name: str,
    title: str,
    description: str,
    annotations: ToolAnnotations = READ_ONLY,
) -> PgTool:
    tool = PgTool.from_function(
        fn, name=name, title=title, description=description, annotations=annotations
    )
    assert isinstance(tool, PgTool)
    tool.parameters = compact_schema(tool.parameters)
    meta = tool.fn_metadata
    if meta.output_schema is not None:
        model = meta.output_model
        meta.output_schema = compact_schema(
            meta.output_schema,
            output=True,
            omits_defaults=isinstance(model, type) and issubclass(model, Compact),
        )
    return tool

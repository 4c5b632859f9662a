"""Tools as values: `ToolDef` (what tools/list shows and how tools/call runs it), and the one
place tool results and tool errors are made.

A built-in tool is an async function `fn(app, **arguments)` turned into a `ToolDef` by
`make_tool`: its signature gives the argument model (pydantic: each parameter's type, default
and constraints) and the input schema; its return annotation `Annotated[CallToolResult,
Model]` gives the output schema. A custom tool (custom/build.py) makes its `ToolDef` from its
YAML: its own input schema, checked by its own handler. Either way, `ToolDef.run` turns
argument-validation failures into PARAMETER_ERROR, our typed `PgMcpError`s into their PRD
codes, and anything unexpected into a masked INTERNAL_ERROR (errors.to_pg_error). Successful
results carry the output twice, as the spec asks: `structuredContent`, and compact JSON text
for clients that read only `content`. Results are not validated against the output schema at
run time (the SDK's `MCPServer` did, on every call): the official client the tests drive
validates every answer it gets against the tool's output schema, and tests/test_values.py
checks the schemas' types with jsonschema.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, get_args

from mcp_types import CallToolResult, TextContent, Tool as McpTool, ToolAnnotations
from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from pg_mcp_server.errors import ParameterError, PgMcpError, to_pg_error
from pg_mcp_server.models.compact import Compact
from pg_mcp_server.models.errors import ErrorDetail, ErrorResponse
from pg_mcp_server.tools.schemas import compact_schema

if TYPE_CHECKING:
    from pg_mcp_server.app import AppContext

logger = logging.getLogger(__name__)

_ECHO_LIMIT = 2000  # characters of each string argument echoed back in input_received

READ_ONLY = ToolAnnotations(
    read_only_hint=True,
    destructive_hint=False,
    idempotent_hint=True,
    open_world_hint=False,
)

Handler = Callable[["AppContext", dict[str, Any]], Awaitable[CallToolResult]]


@dataclass(frozen=True)
class ToolDef:
    """One tool. `handler(app, arguments)` gets the arguments as the client sent them and
    checks them itself (a `make_tool` handler through its argument model)."""

    name: str
    title: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    handler: Handler
    annotations: ToolAnnotations = field(default_factory=lambda: READ_ONLY)

    def listed(self) -> McpTool:
        return McpTool(
            name=self.name,
            title=self.title,
            description=self.description,
            input_schema=self.input_schema,
            output_schema=self.output_schema,
            annotations=self.annotations,
        )

    async def run(self, app: AppContext, arguments: dict[str, Any]) -> CallToolResult:
        try:
            return await self.handler(app, arguments)
        except Exception as exc:
            error = to_pg_error(exc, f"The tool {self.name} failed unexpectedly.")
            logger.info("tool %s -> %s", self.name, error.code)
            return error_result(error, self.name, arguments)


def ok(output: BaseModel) -> CallToolResult:
    """The answer as structured content and the same compact JSON as text (a `Compact` model
    leaves out its fields at their default)."""
    structured = output.dump() if isinstance(output, Compact) else output.model_dump(mode="json")
    return ok_json(structured)


def ok_json(structured: dict[str, Any], encoded: dict[str, str] | None = None) -> CallToolResult:
    """For large results already made of JSON values (query rows): one encoding instead of a
    model's validate, dump and dump-to-JSON. `encoded` holds JSON text already made for some
    keys (the rows, encoded once for the size cap), used as is."""
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


class _Arguments(BaseModel):
    # Arguments a tool does not take are ignored, as MCP servers commonly do (clients add
    # their own, such as a progress token's companions).
    model_config = ConfigDict(extra="ignore")


def _decoded(model: type[BaseModel], arguments: dict[str, Any]) -> dict[str, Any]:
    """Lists and objects some clients send as JSON text (Claude Desktop does), decoded for
    the parameters that are not strings; a string that decodes to a scalar stays as sent."""
    out = dict(arguments)
    for key, value in arguments.items():
        field = model.model_fields.get(key)
        if field is None or not isinstance(value, str) or field.annotation is str:
            continue
        try:
            decoded = json.loads(value)
        except (ValueError, RecursionError):
            continue
        if not isinstance(decoded, str | int | float):
            out[key] = decoded
    return out


def make_tool(
    fn: Callable[..., Awaitable[CallToolResult]],
    *,
    name: str,
    title: str,
    description: str,
    annotations: ToolAnnotations = READ_ONLY,
) -> ToolDef:
    """`fn(app, **arguments)` as a tool (see the module docstring)."""
    signature = inspect.signature(fn, eval_str=True)
    _, *parameters = signature.parameters.values()
    fields: dict[str, Any] = {
        p.name: (p.annotation, ... if p.default is inspect.Parameter.empty else p.default)
        for p in parameters
    }
    model = create_model(f"{name}Arguments", __base__=_Arguments, **fields)
    output = get_args(signature.return_annotation)[1]
    assert isinstance(output, type) and issubclass(output, BaseModel), name
    output_schema = compact_schema(
        output.model_json_schema(), output=True, omits_defaults=issubclass(output, Compact)
    )

    async def handler(app: AppContext, arguments: dict[str, Any]) -> CallToolResult:
        try:
            checked = model.model_validate(_decoded(model, arguments))
        except ValidationError as exc:
            raise parameter_error(exc) from None
        return await fn(app, **{k: getattr(checked, k) for k in fields})

    return ToolDef(
        name=name,
        title=title,
        description=description,
        input_schema=compact_schema(model.model_json_schema()),
        output_schema=output_schema,
        handler=handler,
        annotations=annotations,
    )

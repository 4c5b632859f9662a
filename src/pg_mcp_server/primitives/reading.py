"""read_resource: the server's resources as a tool, for clients that show the model tools
only (several IDE clients never surface resources; pgEdge's server has the same tool).

A read through the tool is the read resources/read makes (`Registry.content`): the same
definitions, caches and guard, the same answer text; its failures are the tool's error
result with the same error object.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

from mcp_types import CallToolResult
from pydantic import BaseModel, Field

from pg_mcp_server.app import AppContext
from pg_mcp_server.errors import from_detail
from pg_mcp_server.tools.registry import ToolDef, make_tool, ok_json

if TYPE_CHECKING:
    from pg_mcp_server.primitives.registry import Registry

DESCRIPTION = """Read a resource of this server by URI, for clients that do not show
resources: pg://system_info, pg://settings, pg://stat/activity, pg://schemas,
pg://schemas/{schema}/tables/{table} and the custom ones (resources/list names them all)."""


class ReadResourceOutput(BaseModel):
    uri: str
    mime_type: str
    contents: Any  # the resource's JSON value, or its text when it is not JSON


def read_resource_tool(registry: Registry) -> ToolDef:
    async def read_resource(
        app: AppContext,
        uri: Annotated[
            str,
            Field(
                min_length=1,
                max_length=2000,
                description="The resource's URI, e.g. pg://schemas/public/tables/orders",
            ),
        ],
    ) -> Annotated[CallToolResult, ReadResourceOutput]:
        from pg_mcp_server.primitives.registry import ToolFailed, text_of

        try:
            content, mime_type = await registry.content(uri, app)
        except ToolFailed as exc:
            raise from_detail(exc.error) from None
        text = text_of(content)
        value: Any = text
        encoded: dict[str, str] = {}
        if mime_type == "application/json":
            value = json.loads(text)
            encoded["contents"] = text  # the resource's own JSON, as is
        structured = {"uri": uri, "mime_type": mime_type, "contents": value}
        return ok_json(structured, encoded=encoded)

    return make_tool(
        read_resource, name="read_resource", title="Read resource", description=DESCRIPTION
    )

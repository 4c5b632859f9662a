"""Server middleware (the SDK's `ServerMiddleware`: it sees each request before its handler).

- `instructions_with_audit`: the role audit runs in the background while the server starts
  (database/pool/audit.py); what it finds is added to the instructions of `initialize` and
  `server/discover` answers, which wait for it a short while.
- `unknown_tool`: `tools/call` with a name no tool has gets our structured PARAMETER_ERROR with
  the closest names and the list of tools, instead of the SDK's plain text "Unknown tool: x"
  (which also echoes a name of any length).
- `bounded_errors`: a JSON-RPC error never repeats more than `ERROR_ECHO` characters of what the
  client sent (the SDK's "Unknown resource: <uri>" echoes a URI of any length).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError

from pg_mcp_server.errors import ParameterError, closest, did_you_mean

Middleware = ServerMiddleware[Any]
NAME_ECHO = 100  # characters of an unknown tool's name repeated in the answer
ERROR_ECHO = 500  # characters of a JSON-RPC error's message
DATA_ECHO = 2000  # characters of its data (dropped if longer)


def instructions_with_audit(render: Callable[[list[str]], str]) -> Middleware:
    async def middleware(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        result = await call_next(ctx)
        if ctx.method not in ("initialize", "server/discover"):
            return result
        audit = getattr(ctx.lifespan_context, "audit", None)
        if audit is None:
            return result
        found = await audit.wait()
        if found and isinstance(result, dict):
            result = {**result, "instructions": render(found)}
        return result

    return middleware


def unknown_tool(server: MCPServer[Any], serves: Callable[[str], bool] | None = None) -> Middleware:
    """`serves(name)`: a quick yes for the server's own tools (listing them all on every call
    would cost each call the making of every tool's listing)."""

    async def middleware(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        params = ctx.params
        if ctx.method != "tools/call" or not isinstance(params, dict):
            return await call_next(ctx)
        name = params.get("name")
        if not isinstance(name, str) or (serves is not None and serves(name)):
            return await call_next(ctx)
        # Asked every time, not cached: reloading custom definitions removes tools too.
        known = {tool.name for tool in await server.list_tools()}
        if name in known:
            return await call_next(ctx)
        shown = name if len(name) <= NAME_ECHO else name[:NAME_ECHO] + "..."
        error = ParameterError(
            f"There is no tool named {shown!r}.",
            suggestion=did_you_mean(
                closest(name[:NAME_ECHO], known), f"Tools: {', '.join(sorted(known))}."
            ),
        )
        from pg_mcp_server.tools.registry import error_result  # made with the tools, later

        arguments = params.get("arguments")
        return error_result(error, shown, arguments if isinstance(arguments, dict) else {})

    return middleware


async def bounded_errors(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    try:
        return await call_next(ctx)
    except MCPError as exc:
        data = exc.data if len(repr(exc.data)) <= DATA_ECHO else None
        if len(exc.message) <= ERROR_ECHO and data is exc.data:
            raise
        message = exc.message[:ERROR_ECHO] + ("..." if len(exc.message) > ERROR_ECHO else "")
        raise MCPError(exc.code, message, data) from None

"""`bounded_errors`: a JSON-RPC error never repeats more than `ERROR_ECHO` characters of what
the client sent (the SDK's own errors, such as "Method not found" with the method as data,
echo input of any length). The SDK's `ServerMiddleware` is the one place that sees them.
"""

from __future__ import annotations

from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError

ERROR_ECHO = 500  # characters of a JSON-RPC error's message
DATA_ECHO = 2000  # characters of its data (dropped if longer)


async def bounded_errors(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    try:
        return await call_next(ctx)
    except MCPError as exc:
        data = exc.data if len(repr(exc.data)) <= DATA_ECHO else None
        if len(exc.message) <= ERROR_ECHO and data is exc.data:
            raise
        message = exc.message[:ERROR_ECHO] + ("..." if len(exc.message) > ERROR_ECHO else "")
        raise MCPError(exc.code, message, data) from None

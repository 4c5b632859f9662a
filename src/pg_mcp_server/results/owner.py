"""Who is asking, for binding held results (and the query history) to their caller.

Over HTTP with bearer tokens the gateway (transport/gateway.py) sets `caller` for each
request to a hash of the caller's token; the SDK serves the request in a task that inherits
the gateway's context, so the tool handler sees it. Without auth (stdio, or HTTP without
MCP_AUTH_TOKENS) every caller is the same one, `LOCAL`: nothing tells two clients apart,
and the unguessable result ids are what keeps one's results from another.
"""

from __future__ import annotations

import hashlib
from contextvars import ContextVar

LOCAL = "local"

caller: ContextVar[str] = ContextVar("pg_mcp_caller", default=LOCAL)


def token_owner(token: bytes) -> str:
    """A caller's name from its bearer token: a hash, so the token itself is never held."""
    return "token:" + hashlib.sha256(b"pg-mcp-server result owner\0" + token).hexdigest()


def current_owner() -> str:
    return caller.get()

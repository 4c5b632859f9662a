"""Results held for paging (issue 22): what a cut answer leaves for the next pages.

- `store`: the `ResultStore` protocol every store implements, and its `Limits`.
- `memory`: the store in this process (MCP_RESULT_STORE=memory).
- `owner`: who is asking (the caller's token's hash over HTTP with auth, else a constant).
- `open_store(settings)`: the store the settings name; the one place a new kind is added.
"""

from __future__ import annotations

from pg_mcp_server.config import ServerSettings
from pg_mcp_server.results.memory import MemoryResultStore
from pg_mcp_server.results.owner import caller, current_owner
from pg_mcp_server.results.store import Limits, ResultStore

__all__ = [
    "Limits",
    "MemoryResultStore",
    "ResultStore",
    "caller",
    "current_owner",
    "limits_of",
    "open_store",
]


def limits_of(settings: ServerSettings) -> Limits:
    return Limits(
        max_bytes=settings.result_store_bytes,
        max_results=settings.result_store_count,
        idle_seconds=settings.result_idle_seconds,
    )


def open_store(settings: ServerSettings) -> ResultStore:
    """The store MCP_RESULT_STORE names: `memory`, or a Redis/Valkey URL."""
    kind = settings.result_store
    if kind == "memory":
        return MemoryResultStore(limits_of(settings))
    if kind.startswith(("redis://", "rediss://")):
        # The shared store (results/redis.py) plugs in here.
        raise ValueError(
            "MCP_RESULT_STORE: a Redis store is not available in this build; use memory"
        )
    raise ValueError(
        f"MCP_RESULT_STORE must be memory or a redis:// or rediss:// URL, not {kind[:40]!r}"
    )

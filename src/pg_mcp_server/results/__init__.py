"""Results held for paging (issue 22): what a cut answer leaves for the next pages.

- `store`: the `ResultStore` protocol every store implements, and its `Limits`.
- `memory`: the store in this process (MCP_RESULT_STORE=memory).
- `redis`: the store in Redis or Valkey, shared by replicas (MCP_RESULT_STORE=redis://...;
  the `redis` package, an optional extra, is imported only then).
- `owner`: who is asking (the caller's token's hash over HTTP with auth, else a constant).
- `open_store(settings)`: the store the settings name; the one place a new kind is added.
- `check_store(settings)`: at start, before serving: a shared store that does not answer
  stops the start (`StoreUnavailable`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pg_mcp_server.config import ServerSettings
from pg_mcp_server.results.memory import MemoryResultStore
from pg_mcp_server.results.owner import caller, current_owner
from pg_mcp_server.results.store import Limits, ResultStore, StoreUnavailable

if TYPE_CHECKING:
    from pg_mcp_server.results.redis import RedisResultStore

REDIS_HINT = (
    "MCP_RESULT_STORE names a Redis store, which needs the optional dependency 'redis': "
    "install the server with its redis extra (uvx --from '/path/to/pg-mcp-server[redis]' "
    "pg-mcp-server, or pip install 'postgres-mcp-layered[redis]')"
)

__all__ = [
    "Limits",
    "MemoryResultStore",
    "ResultStore",
    "StoreUnavailable",
    "caller",
    "check_store",
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
        return _redis(settings)
    raise ValueError(_names_no_store(kind))


def _redis(settings: ServerSettings) -> RedisResultStore:
    """The Redis store, built without I/O: each process (a worker) makes its own client."""
    try:
        from pg_mcp_server.results.redis import RedisResultStore
    except ImportError:
        raise StoreUnavailable(REDIS_HINT) from None
    try:
        return RedisResultStore(settings.result_store, limits_of(settings))
    except ValueError as exc:
        raise ValueError(f"MCP_RESULT_STORE: {exc}") from None


async def check_store(settings: ServerSettings) -> None:
    """Before serving: a shared store must answer. Raises ValueError for a setting that names
    no store, `StoreUnavailable` (naming the store without its password, and the trouble) for
    a store that does not answer or a missing `redis` package. The in-process store needs
    nothing."""
    kind = settings.result_store
    if kind == "memory":
        return
    if not kind.startswith(("redis://", "rediss://")):
        raise ValueError(_names_no_store(kind))
    store = _redis(settings)
    try:
        await store.check()
    finally:
        await store.close()


def _names_no_store(kind: str) -> str:
    # Only a URL's scheme is shown: the rest may hold a password.
    shown = kind.partition("://")[0][:20] + "://..." if "://" in kind else kind[:40]
    return f"MCP_RESULT_STORE must be memory or a redis:// or rediss:// URL, not {shown!r}"

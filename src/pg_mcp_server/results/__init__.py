"""Results held for paging (issue 22): what a cut answer leaves for the next pages.

- `store`: the `ResultStore` protocol every store implements, and its `Limits`.
"""

from pg_mcp_server.results.store import Limits, ResultStore

__all__ = ["Limits", "ResultStore"]

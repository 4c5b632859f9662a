"""The protocol of a store of paged results, shared by the in-process and the Redis store.

A result is held as its pages, already cut to the answer budget when it was made, so that
reading page `n` is a look-up, never a query: the statement ran once, from one snapshot, and
its transaction ended before the first page was answered (nothing holds a transaction open
on the database while a client pages).

Every result belongs to an `owner` (the caller: a hash of its bearer token over HTTP with
auth, else a constant) and has an unguessable id (`secrets.token_urlsafe`, >= 128 bits). A
page asked with another owner, an unknown id, an expired or evicted result answers the same
`ResultExpiredError` (errors.py), so a caller learns nothing of another's results.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Limits:
    max_bytes: int  # MCP_RESULT_STORE_BYTES: all results held at once, pages' bytes summed
    max_results: int  # MCP_RESULT_STORE_COUNT
    idle_seconds: float  # MCP_RESULT_IDLE_SECONDS: each read of a page renews it


class StoreUnavailable(Exception):
    """The store could not do what was asked: a shared store that is down, out of memory or
    refusing the login. Its message never holds a password: raised by `put`, it names only
    the trouble (it may reach a client); raised when the store is opened, also the store's
    address (for the operator).

    `put` raises it instead of failing the query: the caller answers the first page as usual,
    without a cursor, with a note that paging is unavailable (run the query again later or
    narrow it). `page` never raises it (a page it cannot read is `ResultExpiredError`, whose
    suggestion says why). A store that cannot be reached when it is opened raises it too, and
    the server refuses to start."""


class ResultStore(Protocol):
    async def put(self, owner: str, pages: Sequence[bytes]) -> str:
        """Hold `pages` (page 0 first; opaque bytes) for `owner` and return the result's id.
        Least recently read results are evicted to stay within the limits. The caller keeps
        a result within `max_bytes` before putting it (it reads no more than that); a bigger
        one is a bug here (ValueError). Raises `StoreUnavailable` when it cannot hold it (a
        shared store that is down): answer without a cursor then, never fail the query."""
        ...

    async def page(self, owner: str, result_id: str, index: int) -> tuple[bytes, int]:
        """Page `index` of the result and how many pages it has; renews its idle time.
        Raises `ResultExpiredError` when it is not held for `owner` (or `index` is past the
        end: a cursor only ever names a page that exists)."""
        ...

    async def close(self) -> None:
        """Let go of what the store holds (connections to a shared store)."""
        ...

"""The result store in this process's memory (MCP_RESULT_STORE=memory, the default).

One dict in least-recently-read order: a read moves its result to the end. A `put` evicts
until the new result fits MCP_RESULT_STORE_BYTES and MCP_RESULT_STORE_COUNT, each time the
least recently read result of the owner that holds the most (bytes, or results when the
count is what is over; the new result counted as its owner's): one caller's big or many
results evict its own before another's, so each owner keeps a fair share (attack4 F-G).
Idle expiry is lazy (a read of an expired result, and every `put`, drop what has been idle
for MCP_RESULT_IDLE_SECONDS), so no task runs in the background, and what is held is bounded
by the byte and count limits whether or not anything expires. Times come from a monotonic
clock: a wall-clock step must not expire or keep results.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pg_mcp_server.errors import ResultExpiredError
from pg_mcp_server.results.store import Limits

ID_BYTES = 18  # 144 random bits, 24 URL-safe characters


@dataclass
class _Held:
    owner: str
    pages: tuple[bytes, ...]
    size: int
    read_at: float


def expired() -> ResultExpiredError:
    """The one answer for a result that is not held for the caller, whatever the reason."""
    return ResultExpiredError(
        "This result is no longer held (it expired, was evicted, or is not yours)."
    )


class MemoryResultStore:
    """`ResultStore` in process memory (see the module docstring)."""

    def __init__(self, limits: Limits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self._clock = clock
        self._held: OrderedDict[str, _Held] = OrderedDict()
        # Each owner's results in least-recently-read order, and the bytes they hold.
        self._owned: dict[str, OrderedDict[str, None]] = {}
        self._owned_bytes: dict[str, int] = {}
        self.bytes = 0  # pages' bytes held now (the benchmark and tests read it)

    def __len__(self) -> int:
        return len(self._held)

    async def put(self, owner: str, pages: Sequence[bytes]) -> str:
        size = sum(len(p) for p in pages)
        if size > self.limits.max_bytes:
            raise ValueError(
                f"a result of {size} bytes cannot be held in {self.limits.max_bytes} "
                "(the reader keeps a result within MCP_RESULT_STORE_BYTES)"
            )
        now = self._clock()
        self._expire(now)
        while self._held:
            if len(self._held) >= self.limits.max_results:
                self._drop(self._victim(owner, 1, lambda o: len(self._owned[o])))
            elif self.bytes + size > self.limits.max_bytes:
                self._drop(self._victim(owner, size, self._owned_bytes.__getitem__))
            else:
                break
        result_id = secrets.token_urlsafe(ID_BYTES)
        self._held[result_id] = _Held(owner, tuple(pages), size, now)
        self._owned.setdefault(owner, OrderedDict())[result_id] = None
        self._owned_bytes[owner] = self._owned_bytes.get(owner, 0) + size
        self.bytes += size
        return result_id

    def _victim(self, putter: str, adding: int, use: Callable[[str], int]) -> str:
        """The least recently read result of the owner whose `use` is the most, `adding`
        counted as the putter's; of owners that use as much, the one whose result was read
        longest ago."""

        def weight(owner: str) -> tuple[int, float]:
            oldest = self._held[next(iter(self._owned[owner]))].read_at
            return use(owner) + (adding if owner == putter else 0), -oldest

        heaviest = max(self._owned, key=weight)
        return next(iter(self._owned[heaviest]))

    async def page(self, owner: str, result_id: str, index: int) -> tuple[bytes, int]:
        now = self._clock()
        held = self._held.get(result_id)
        if held is None or held.owner != owner:
            raise expired()
        if now - held.read_at > self.limits.idle_seconds:
            self._drop(result_id)
            raise expired()
        if not 0 <= index < len(held.pages):
            raise expired()
        held.read_at = now
        self._held.move_to_end(result_id)
        self._owned[owner].move_to_end(result_id)
        return held.pages[index], len(held.pages)

    async def close(self) -> None:
        self._held.clear()
        self._owned.clear()
        self._owned_bytes.clear()
        self.bytes = 0

    def _drop(self, result_id: str) -> None:
        gone = self._held.pop(result_id)
        self.bytes -= gone.size
        owned = self._owned[gone.owner]
        del owned[result_id]
        self._owned_bytes[gone.owner] -= gone.size
        if not owned:
            del self._owned[gone.owner], self._owned_bytes[gone.owner]

    def _expire(self, now: float) -> None:
        # Least recently read first: the first one still fresh ends the walk.
        while self._held:
            result_id, held = next(iter(self._held.items()))
            if now - held.read_at <= self.limits.idle_seconds:
                return
            self._drop(result_id)

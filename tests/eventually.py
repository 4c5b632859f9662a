"""Waiting on a condition, never on the clock: the suite's one way to wait (issue 21).

`eventually` (async) and `wait_for` (sync, for child processes) poll a check until it gives
something true, and give that back; past the deadline `eventually` fails the test saying what
never happened, `wait_for` returns False for the caller's own assertion. The deadline only
bounds a test that is already failing: a passing test waits exactly as long as the condition
takes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def eventually(
    check: Callable[[], Awaitable[T]],
    *,
    what: str = "the condition",
    seconds: float = 15.0,
    interval: float = 0.02,
) -> T:
    """The first true value `check()` gives; an AssertionError naming `what` if none comes
    within `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} never came true within {seconds:g} s")
        await asyncio.sleep(interval)


def wait_for(condition: Callable[[], bool], timeout: float, interval: float = 0.02) -> bool:
    """Whether `condition()` came true within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True

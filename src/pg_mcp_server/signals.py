"""SIGINT, SIGTERM and SIGHUP, handled in one place.

Each of them ends the server in order: the transport stops, the pool closes, the demo database
is stopped and deleted. Before the server serves (imports, settings, the demo starting) a signal
raises `Stop` where the program is, so the `with` blocks on the way out clean up; while it
serves, it calls the transport's `wake` callback instead, which stops it from inside its event
loop. Once the way out has begun, further signals are ignored, so a second Ctrl-C (or the
SIGINT `uv run` forwards after the terminal's own) cannot cut the clean-up short.

SIGHUP first asks `on_hangup`: a hook for a server that reloads its definitions on SIGHUP (when
it returns True, nothing else happens). Without one, SIGHUP means the terminal closed: stop.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from types import FrameType

import anyio

logger = logging.getLogger(__name__)

SIGNALS = tuple(
    s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None
)


class Stop(BaseException):
    """Raised by a stop signal that arrives while the server is not serving yet."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Signals:
    def __init__(self) -> None:
        self.on_hangup: Callable[[], bool] | None = None
        self._stopping = False
        self._wake: Callable[[int], None] | None = None

    def install(self) -> None:
        for sig in SIGNALS:
            signal.signal(sig, self._handle)

    def stopping(self) -> None:
        """The way out has begun (whatever began it): later signals must not interrupt it."""
        self._stopping = True

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if signum == getattr(signal, "SIGHUP", None) and self.on_hangup and self.on_hangup():
            return
        if self._stopping:
            logger.debug("%s while stopping: ignored", signal.Signals(signum).name)
            return
        self._stopping = True
        logger.info("%s received: stopping", signal.Signals(signum).name)
        if self._wake is not None:
            self._wake(signum)
            return
        raise Stop(signum)

    @contextlib.contextmanager
    def forwarding(self, wake: Callable[[int], None]) -> Iterator[None]:
        """While the body runs, a stop signal calls `wake` instead of raising: for an event
        loop that wakes up on its own (uvicorn checks for a stop ten times a second)."""
        self._wake = wake
        try:
            yield
        finally:
            self._wake = None

    @contextlib.asynccontextmanager
    async def serving(self, wake: Callable[[int], None]) -> AsyncIterator[None]:
        """While the body runs, a stop signal calls `wake` (in the event loop's thread) instead
        of raising. A signal can be delivered to any thread; the wake-up descriptor makes sure
        the loop wakes to run the handler even when the main thread sleeps in it."""
        reader, writer = socket.socketpair()
        reader.setblocking(False)
        writer.setblocking(False)
        previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        try:
            async with anyio.create_task_group() as tasks:
                self._wake = wake

                async def drain() -> None:
                    while True:
                        await anyio.wait_readable(reader)
                        with contextlib.suppress(BlockingIOError):
                            reader.recv(512)

                tasks.start_soon(drain)
                try:
                    yield
                finally:
                    tasks.cancel_scope.cancel()
        finally:
            self._wake = None
            signal.set_wakeup_fd(previous)
            reader.close()
            writer.close()

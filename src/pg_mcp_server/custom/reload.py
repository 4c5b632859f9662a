"""Load, check and swap a server's custom definitions: at start, on SIGHUP, when the file
changes.

A new file is validated and checked against the database before it replaces anything; a bad
one leaves the served definitions as they were and is logged (one line). When the database
cannot be reached, the file is still validated, served without its output schemas, and
checked again until the database answers. The server is told of every swap (`on_change`) and
tells its clients which lists changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from pg_mcp_server.config import Settings
from pg_mcp_server.custom.build import Loaded, build
from pg_mcp_server.custom.check import check
from pg_mcp_server.custom.loader import read
from pg_mcp_server.custom.specs import DefinitionsError, Reserved
from pg_mcp_server.database.pool import Database
from pg_mcp_server.errors import DatabaseConnectionError

logger = logging.getLogger(__name__)

POLL_S = 1.0  # how often the file is looked at
RECHECK_S = 10.0  # how often definitions served unchecked are checked again
_LOG_CHARS = 2000


def _stamp(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


def _digest(path: str) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _one_line(exc: DefinitionsError) -> str:
    text = " | ".join(exc.problems)
    return text if len(text) <= _LOG_CHARS else text[:_LOG_CHARS] + "..."


def _in_order(problems: list[str]) -> list[str]:
    """`file:line: ...` problems by their line (stable: a line's own stay in order)."""

    def line(problem: str) -> int:
        head = problem.split(": ", 1)[0].rsplit(":", 1)
        return int(head[1]) if len(head) == 2 and head[1].isdigit() else 0

    return sorted(problems, key=line)


async def load_checked(
    path: str, settings: Settings, reserved: Reserved, db: Database, *, quiet: bool = False
) -> Loaded:
    """The file validated, checked against the database and built; DefinitionsError if any
    definition is refused. An unreachable database skips the check (logged). `quiet`: the
    tools left out are not logged (the load that serves them does)."""
    defs, problems = read(path, settings.server, reserved)
    try:
        checked = await check(
            defs,
            db,
            settings.server.trusted_roles,
            allow_open_code=settings.server.allow_open_schema_code,
        )
    except DefinitionsError as refused:  # with the file's other problems, in line order
        raise DefinitionsError(_in_order(problems + refused.problems)) from None
    except DatabaseConnectionError as exc:
        logger.warning(
            "custom definitions in %s not checked against the database (%s); serving them "
            "unchecked until it answers",
            path,
            exc.message,
        )
        checked = None
    if problems:
        raise DefinitionsError(problems)
    return build(defs, checked, settings, quiet=quiet)


async def check_file(settings: Settings, reserved: Reserved) -> None:
    """For start-up: raises DefinitionsError when the configured file cannot be served."""
    path = settings.server.custom_definitions
    assert path is not None
    db = Database(settings.database)
    try:
        await load_checked(path, settings, reserved, db, quiet=True)
    finally:
        await db.dispose()


class CustomDefinitions:
    """The definitions one server serves (`current`), kept up to date while it runs."""

    def __init__(
        self,
        settings: Settings,
        reserved: Reserved,
        on_change: Callable[[Loaded, Loaded], Awaitable[None]],
    ) -> None:
        assert settings.server.custom_definitions is not None
        self.path: str = settings.server.custom_definitions
        self.settings = settings
        self.reserved = reserved
        self.current = Loaded()
        self.on_change = on_change
        # A service (stdin not a terminal) reloads on SIGHUP; from a terminal it means the
        # terminal closed. Decided now: a transport may move stdin later.
        self.service = not os.isatty(0)
        self._lock = asyncio.Lock()
        self._db: Database | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._stamp: tuple[int, int, int] | None = None
        self._digest: str | None = None
        self._checked_at = 0.0

    async def start(self, db: Database) -> None:
        """Load the file (DefinitionsError if it cannot be served) and watch it."""
        self._db = db
        self._stamp, self._digest = _stamp(self.path), _digest(self.path)
        await self._swap(await load_checked(self.path, self.settings, self.reserved, db))
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._task = self._loop.create_task(self._watch())

    async def stop(self) -> None:
        task, self._task, self._loop = self._task, None, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def on_hangup(self) -> bool:
        """For the SIGHUP handler: True when SIGHUP means "reload" here (a service) and a
        reload is under way; False means the terminal closed (stop). Safe from a signal
        handler or another thread."""
        if not self.service:
            return False
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            loop.call_soon_threadsafe(wake.set)
        return True

    async def reload(self, why: str) -> bool:
        """Load, check and swap in the file; False (logged, nothing changed) if it is refused."""
        assert self._db is not None, "start() first"
        async with self._lock:
            self._stamp, self._digest = _stamp(self.path), _digest(self.path)
            self._checked_at = time.monotonic()
            try:
                loaded = await load_checked(self.path, self.settings, self.reserved, self._db)
            except DefinitionsError as exc:
                logger.warning(
                    "custom definitions not reloaded (%s), the previous ones stay: %s",
                    why,
                    _one_line(exc),
                )
                return False
            await self._swap(loaded)
            logger.info(
                "custom definitions reloaded (%s): %d tools, %d resources, %d templates, "
                "%d prompts",
                why,
                len(loaded.tools),
                len(loaded.resources),
                len(loaded.templates),
                len(loaded.prompts),
            )
            return True

    async def _swap(self, loaded: Loaded) -> None:
        old, self.current = self.current, loaded
        await self.on_change(old, loaded)

    def _changed(self) -> bool:
        stamp = _stamp(self.path)
        if stamp is None or stamp == self._stamp:
            return False  # a file being replaced is briefly missing: wait for it
        self._stamp = stamp
        if _digest(self.path) == self._digest:
            logger.debug("custom definitions file %s touched, not changed", self.path)
            return False
        return True

    async def _watch(self) -> None:
        assert self._wake is not None
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), POLL_S)
            try:
                if self._wake.is_set():
                    self._wake.clear()
                    await self.reload("SIGHUP")
                elif self._changed():
                    await self.reload("the file changed")
                elif not self.current.checked and time.monotonic() - self._checked_at > RECHECK_S:
                    await self.reload("checking against the database again")
            except Exception:
                logger.exception("reloading the custom definitions failed unexpectedly")

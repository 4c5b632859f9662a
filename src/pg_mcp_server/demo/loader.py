"""Load the demo schema and start a throwaway server that holds it."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from importlib import resources

import asyncpg

from pg_mcp_server.embedded import EmbeddedPostgres

_log = logging.getLogger(__name__)

_DATABASE = "demo"


def demo_sql() -> str:
    """The demo script's text, read from the installed package (works from a wheel or zip)."""
    return (
        resources.files(__package__ or "pg_mcp_server.demo")
        .joinpath("demo.sql")
        .read_text(encoding="utf-8")
    )


async def load_demo(dsn: str) -> None:
    """Create and fill the demo tables in the (fresh, empty) database at ``dsn``.

    Runs as one transaction, so a failure leaves the database empty rather than half-built.
    """
    sql = demo_sql()
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            await conn.execute(sql)
    finally:
        await conn.close()


@contextmanager
def start_demo() -> Iterator[str]:
    """Start an embedded server with a loaded ``demo`` database; yield its DSN.

    For synchronous callers (e.g. ``main()`` before the server's event loop starts). Inside a
    running event loop use :func:`astart_demo` instead.
    """
    started = time.perf_counter()
    with EmbeddedPostgres() as server:
        dsn = server.create_database(_DATABASE)
        asyncio.run(load_demo(dsn))
        _log.info("demo database ready in %.2f s", time.perf_counter() - started)
        yield dsn


@asynccontextmanager
async def astart_demo() -> AsyncIterator[str]:
    """Async variant of :func:`start_demo`.

    Starting the server blocks the loop for about a second; acceptable at start-up, and it keeps
    the SIGTERM hook installable (that needs the main thread).
    """
    started = time.perf_counter()
    with EmbeddedPostgres() as server:
        dsn = server.create_database(_DATABASE)
        await load_demo(dsn)
        _log.info("demo database ready in %.2f s", time.perf_counter() - started)
        yield dsn

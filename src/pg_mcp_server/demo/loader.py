"""Load the demo schema and start a throwaway server that holds it."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from importlib import resources
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from pg_mcp_server.embedded import EmbeddedPostgres

_log = logging.getLogger(__name__)

_DATABASE = "demo"
READER = "demo_reader"

# The server connects as a role that can only read, as the README recommends for real use,
# so the demo shows the least-privilege set-up (and the start-up audit finds nothing to report).
READER_SQL = f"""
CREATE ROLE {READER} LOGIN;
GRANT USAGE ON SCHEMA public TO {READER};
GRANT SELECT ON ALL TABLES IN SCHEMA public TO {READER};
ALTER ROLE {READER} SET default_transaction_read_only = on;
"""


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


async def add_reader(dsn: str) -> str:
    """Create the read-only demo role; return `dsn` logging in as it (trust auth on the
    embedded server's private socket)."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(READER_SQL)
    finally:
        await conn.close()
    parts = urlsplit(dsn)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{READER}@{host}"))


async def _prepare(dsn: str) -> str:
    await load_demo(dsn)
    # product_descriptions, for similarity_search (only where the server has pgvector).
    from pg_mcp_server.demo.vectors import load_vectors

    await load_vectors(dsn)
    return await add_reader(dsn)


@contextmanager
def start_demo() -> Iterator[str]:
    """Start an embedded server with a loaded ``demo`` database; yield its DSN.

    For synchronous callers (e.g. ``main()`` before the server's event loop starts). Inside a
    running event loop use :func:`astart_demo` instead.
    """
    started = time.perf_counter()
    server = EmbeddedPostgres()
    try:
        dsn = asyncio.run(_prepare(server.create_database(_DATABASE)))
        _log.info("demo database ready in %.2f s", time.perf_counter() - started)
        yield dsn
    finally:
        # A sample database: the exit need not wait for its files to be deleted.
        server.stop(wait=False)


@asynccontextmanager
async def astart_demo() -> AsyncIterator[str]:
    """Async variant of :func:`start_demo`.

    Starting the server blocks the loop for about a second; acceptable at start-up, and it keeps
    the SIGTERM hook installable (that needs the main thread).
    """
    started = time.perf_counter()
    with EmbeddedPostgres() as server:
        dsn = await _prepare(server.create_database(_DATABASE))
        _log.info("demo database ready in %.2f s", time.perf_counter() - started)
        yield dsn

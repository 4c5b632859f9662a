"""Shared pytest fixtures."""

from __future__ import annotations

import logging
import os
import secrets
import time
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
import redisbed
from pgbed import DATASET_FILES, PgServer, load_datasets, start_server

from pg_mcp_server.demo import load_demo

_log = logging.getLogger(__name__)

# The test PostgreSQL's role is a superuser, which a server refuses at start unless allowed:
# servers the tests start (in process, or as a child inheriting this environment) allow it.
# Tests of the refusal set it to false.
os.environ.setdefault("MCP_ALLOW_PRIVILEGED_ROLE", "true")

# =============================================================================================
# PostgreSQL test bed: pg, datasets, demo_dsn, scratch_dsn (implementation in tests/pgbed.py).
# A missing PostgreSQL fails the run: these fixtures never skip.
# =============================================================================================


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def pg() -> AsyncIterator[PgServer]:
    """The session's server: PG_TEST_DSN, else a Docker container, else embedded PostgreSQL."""
    try:
        server = start_server()
    except Exception as exc:
        pytest.fail(f"no PostgreSQL for the tests: {type(exc).__name__}: {exc}", pytrace=False)
    _log.info("test PostgreSQL source: %s", server.source)
    try:
        await server.skip_flushes()
        yield server
    finally:
        try:
            if server.shared:
                await server.drop_created()
        finally:
            server.close()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def datasets(pg: PgServer) -> AsyncIterator[dict[str, str]]:
    """DSNs of pagila, chinook, northwind and adventureworks, each in a fresh database."""
    started = time.perf_counter()
    loaded = await load_datasets(pg, DATASET_FILES)
    _log.info("datasets loaded in %.1f s", time.perf_counter() - started)
    yield {name: db.dsn for name, db in loaded.items()}
    # Throwaway servers vanish with their databases; only a shared one needs tidying.
    if pg.shared:
        for db in loaded.values():
            await pg.drop_database(db.name)


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def demo_dsn(pg: PgServer) -> AsyncIterator[str]:
    """DSN of a fresh database holding the --demo schema and data. Treat it as read-only."""
    db = await pg.create_database("demo")
    await load_demo(db.dsn)
    yield db.dsn
    if pg.shared:
        await pg.drop_database(db.name)


@pytest_asyncio.fixture(loop_scope="session")
async def scratch_dsn(pg: PgServer) -> AsyncIterator[str]:
    """DSN of an empty database for one test; dropped afterwards."""
    db = await pg.create_database("scratch")
    yield db.dsn
    await pg.drop_database(db.name)


# =============================================================================================
# Shared result store: one redis-server per session (tests/redisbed.py; Debian's package, which
# .ci/run installs). Tests that stop a server start their own with redisbed.start_redis().
# =============================================================================================


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """URL (with a password: every test goes through AUTH) of the session's redis-server."""
    if not redisbed.available():
        pytest.skip(
            f"redis-server is not installed ({redisbed.BINARY}): apt-get install redis-server"
        )
    server = redisbed.start_redis(password=secrets.token_urlsafe(12))
    try:
        yield server.url()
    finally:
        server.stop()

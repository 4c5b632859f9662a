"""Opening a connection: the one place asyncpg.connect is called, for the pool and the
start-up audit alike, so that a host that never answers and a refused SSL upgrade say so.

Light on purpose (asyncpg and our errors only): the audit runs while the server starts,
before SQLAlchemy and pglast are imported.
"""

from __future__ import annotations

import asyncpg

from pg_mcp_server.config import APPLICATION_NAME, DatabaseSettings
from pg_mcp_server.errors import DatabaseConnectionError

# Statements longer than this are parsed and planned again on every call (asyncpg's default
# is 15 KiB; describe_table's own statement is 16 KB pinned: caching it took a warm describe
# of Pagila's film from 6.4-7.3 ms to 1.6-2.2 ms in process). 32 KiB keeps every statement of
# ours cached with room, and bounds what 100 cached statements per connection can hold.
MAX_CACHEABLE = 32 * 1024


async def connect(settings: DatabaseSettings, *, statement_cache_size: int) -> asyncpg.Connection:
    seconds = settings.connect_timeout
    try:
        return await asyncpg.connect(
            **settings.connect_kwargs(),
            timeout=seconds,
            # Asked for at start-up, which wins over a role's or database's setting: the guard
            # parses SQL as PostgreSQL does with it on (see guard/state.py).
            server_settings={
                "application_name": APPLICATION_NAME,
                "standard_conforming_strings": "on",
            },
            statement_cache_size=statement_cache_size,
            max_cacheable_statement_size=MAX_CACHEABLE,
        )
    except TimeoutError:
        raise DatabaseConnectionError(
            f"The database did not answer within {seconds:g} s (PG_CONNECT_TIMEOUT).",
            suggestion="Check the host and port (something there accepts connections but does "
            "not answer as PostgreSQL), or raise PG_CONNECT_TIMEOUT.",
        ) from None
    except ConnectionError as exc:
        # asyncpg's words when the server answers "no SSL" to a connection that requires it;
        # left alone, that reads as "could not be reached".
        if "SSL" not in str(exc):
            raise
        raise DatabaseConnectionError(
            "The database server does not accept SSL connections, and the connection requires "
            "SSL (sslmode).",
            suggestion="Enable SSL on the server, or set PG_SSLMODE (or sslmode in the DSN) to "
            "prefer or disable if an unencrypted connection is acceptable.",
        ) from None

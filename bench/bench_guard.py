"""Per-call cost of the SQL guard (`SqlGuard.check`), in-process on a real PostgreSQL 18.

For a typical query on a small schema and on the 10,000-table catalog (bench/catalog.py,
variant "spread"), on one plain asyncpg connection:
  - cold: the first check of a new guard (it reads the catalog facts);
  - idle: 100 checks after 10 warm-up ones, nothing committing anywhere;
  - busy: 100 checks while another session commits an INSERT in a loop (the snapshot moves
    between any two checks, so every check digests the rows it relies on);
  - after DDL: the first check after ALTER TABLE on a table the query reads (that relation is
    read again), and after CREATE CAST (the whole code catalog is read again);
and the statements per check, counted by pg_stat_statements (preloaded). Times are wall-clock
on a shared 2-core machine: noisy; compare runs made back to back.

The same script measures the guard of another checkout (only `SqlGuard()` and `check` are
used): `PYTHONPATH=/work/main/src uv run python bench/bench_guard.py`.

Run: uv run python bench/bench_guard.py [--no-catalog]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import catalog
from benchlib import create_database, embedded_server

from pg_mcp_server.database.guard import SqlGuard
from pg_mcp_server.embedded import EmbeddedPostgres

SERVER_SETTINGS = {**catalog.SERVER_SETTINGS, "shared_preload_libraries": "pg_stat_statements"}
RUNS = 100

SMALL = """
CREATE EXTENSION pg_stat_statements;
CREATE TYPE status AS ENUM ('new', 'paid', 'shipped');
CREATE DOMAIN money_amount AS numeric(12, 2) CHECK (VALUE >= 0);
CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, email text);
CREATE TABLE orders (id int PRIMARY KEY, customer_id int REFERENCES customers,
                     status status NOT NULL, total money_amount, created_at timestamptz);
CREATE VIEW paid_orders AS SELECT * FROM orders WHERE status = 'paid';
CREATE TABLE churn (id bigserial PRIMARY KEY);
INSERT INTO customers SELECT g, 'c' || g, 'c' || g || '@x' FROM generate_series(1, 100) g;
INSERT INTO orders SELECT g, 1 + g % 100, (ARRAY['new','paid','shipped'])[1 + g % 3]::status,
       g, now() FROM generate_series(1, 1000) g;
ANALYZE;
"""
SMALL_QUERY = (
    "SELECT o.id, c.name, o.total FROM paid_orders o JOIN customers c ON c.id = o.customer_id "
    "WHERE o.total > 10 AND lower(c.email) LIKE 'c1%' ORDER BY o.created_at DESC LIMIT 10"
)
CATALOG_EXTRA = "CREATE EXTENSION pg_stat_statements; CREATE TABLE churn (id bigserial PRIMARY KEY)"
CATALOG_QUERY = (
    "SELECT t.id, t.name, p.amount FROM s05.t499 t JOIN s05.t498 p ON p.id = t.parent_id "
    "WHERE t.amount > 10 AND t.status = 'active' ORDER BY t.created_at DESC LIMIT 10"
)

STATEMENTS = """
SELECT coalesce(sum(calls), 0) FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND query NOT LIKE '%pg_stat_statements%' AND query NOT LIKE 'INSERT INTO churn%'
"""


@asynccontextmanager
async def committing(dsn: str) -> AsyncIterator[list[int]]:
    """Another session committing one INSERT after another until the block ends."""
    commits = [0]
    stop = asyncio.Event()

    async def loop() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            while not stop.is_set():
                await conn.execute("INSERT INTO churn DEFAULT VALUES")
                commits[0] += 1
        finally:
            await conn.close()

    task = asyncio.create_task(loop())
    while commits[0] < 5:
        await asyncio.sleep(0.01)
    try:
        yield commits
    finally:
        stop.set()
        await task


async def timed(guard: SqlGuard, sql: str, conn: asyncpg.Connection, n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        await guard.check(sql, conn)
        out.append((time.perf_counter() - start) * 1000)
    return out


async def statements_per_check(
    guard: SqlGuard, sql: str, conn: asyncpg.Connection, stats: asyncpg.Connection
) -> float:
    await stats.execute("SELECT pg_stat_statements_reset()")
    await timed(guard, sql, conn, RUNS)
    calls: int = await stats.fetchval(STATEMENTS)
    return calls / RUNS


def line(label: str, samples: list[float]) -> str:
    p95 = sorted(samples)[int(len(samples) * 0.95) - 1]
    return (
        f"  {label:<26} median {statistics.median(samples):6.3f} ms  "
        f"mean {statistics.fmean(samples):6.3f} ms  p95 {p95:6.3f} ms"
    )


async def measure(name: str, dsn: str, sql: str, table: str) -> None:
    conn = await asyncpg.connect(dsn)
    stats = await asyncpg.connect(dsn)
    try:
        guard = SqlGuard()
        print(f"{name}: {sql}", flush=True)
        (cold,) = await timed(guard, sql, conn, 1)
        print(f"  {'cold (first check)':<26} {cold:8.1f} ms")
        await timed(guard, sql, conn, 10)
        print(line("idle, 100 checks", await timed(guard, sql, conn, RUNS)))
        idle = await statements_per_check(guard, sql, conn, stats)
        round_trip = await timed_round_trip(conn)
        print(f"  {'SELECT 1 round trip':<26} median {round_trip:6.3f} ms")
        async with committing(dsn) as commits:
            before = commits[0]
            busy = await timed(guard, sql, conn, RUNS)
            print(line("busy, 100 checks", busy) + f"  ({commits[0] - before} commits meanwhile)")
            busy_statements = await statements_per_check(guard, sql, conn, stats)
        print(f"  statements per check: idle {idle:.2f}, busy {busy_statements:.2f}")
        await stats.execute(f"ALTER TABLE {table} ADD COLUMN bench_extra int")
        (altered,) = await timed(guard, sql, conn, 1)
        await stats.execute(f"ALTER TABLE {table} DROP COLUMN bench_extra")
        await stats.execute(
            "CREATE TYPE bench_box AS (v int); "
            "CREATE CAST (int AS bench_box) WITH INOUT; DROP CAST (int AS bench_box)"
        )
        (cast,) = await timed(guard, sql, conn, 1)
        print(
            f"  {'first check after DDL':<26} ALTER TABLE {altered:.1f} ms, "
            f"CREATE/DROP CAST {cast:.1f} ms"
        )
    finally:
        await conn.close()
        await stats.close()


async def timed_round_trip(conn: asyncpg.Connection) -> float:
    samples = []
    for _ in range(RUNS):
        start = time.perf_counter()
        await conn.fetchval("SELECT 1")
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


async def run(pg: EmbeddedPostgres, with_catalog: bool) -> None:
    small = await create_database(pg, "guard_small")
    conn = await asyncpg.connect(small)
    await conn.execute(SMALL)
    await conn.close()
    await measure("small schema", small, SMALL_QUERY, "orders")
    if with_catalog:
        big = await catalog.build(pg, catalog.SPREAD)
        conn = await asyncpg.connect(big)
        await conn.execute(CATALOG_EXTRA)
        await conn.close()
        await measure("10,000-table catalog", big, CATALOG_QUERY, "s05.t499")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--no-catalog", action="store_true", help="skip the 10,000-table catalog")
    args = p.parse_args()
    with embedded_server(SERVER_SETTINGS) as pg:
        asyncio.run(run(pg, not args.no_catalog))


if __name__ == "__main__":
    main()

"""What holding custom SQL to the pinning rules costs (custom/resolve.py, custom/runner.py).

1. At start: `resolve()` per statement (PREPARE for the parameter types, two rolled-back
   BEGIN ATOMIC probes, pglast's qualify and pin), first time (pglast cold for that text)
   and again (pin's cache warm), for statements shaped like examples/custom-definitions.yaml.
2. Per call, on one connection: a custom statement's transaction as it was (`BEGIN READ
   ONLY; SET LOCAL statement_timeout`, prepare, fetch, ROLLBACK) and as it is now (the same
   BEGIN message also sets `search_path = pg_catalog, pg_temp`; after the prepare, one
   `set_config('search_path', <PL path>)` round trip when the statement is fully pinned).

    uv run python bench/bench_custom.py
"""

from __future__ import annotations

import asyncio
import statistics
import time

import asyncpg
from common import summary

from pg_mcp_server.custom.resolve import SET_PATH, SET_RESTRICTED, pl_path, resolve, trusted_roles
from pg_mcp_server.embedded import EmbeddedPostgres

FIXTURE = """
CREATE TYPE public.order_status AS ENUM ('pending', 'paid', 'shipped');
CREATE TABLE public.users (id int PRIMARY KEY, email text NOT NULL);
CREATE TABLE public.orders (id int PRIMARY KEY, user_id int REFERENCES public.users,
    status public.order_status NOT NULL, total_amount numeric, placed_at timestamptz);
INSERT INTO public.users SELECT i, 'u' || i || '@x' FROM generate_series(1, 1000) i;
INSERT INTO public.orders SELECT i, 1 + i % 1000, (ARRAY['pending', 'paid', 'shipped'])[1 + i % 3]
    ::public.order_status, i, now() FROM generate_series(1, 10000) i;
ANALYZE;
"""
STATEMENTS = {
    "completion": "SELECT email FROM users WHERE email LIKE $1 || '%' ORDER BY email LIMIT 101",
    "enum completion": "SELECT unnest(enum_range(NULL::order_status))::text",
    "stats resource": "SELECT status, count(*) AS orders, sum(total_amount) AS value "
    "FROM orders GROUP BY status ORDER BY status",
    "tool": "SELECT o.id, o.status, o.total_amount FROM orders o JOIN users u "
    "ON u.id = o.user_id WHERE u.email = $1 AND ($2::order_status IS NULL "
    "OR o.status = $2::order_status) ORDER BY o.placed_at DESC, o.id LIMIT $3",
}
RUNS = 300


async def main() -> None:
    with EmbeddedPostgres() as pg:
        dsn = pg.dsn()
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(FIXTURE)
            trusted = await trusted_roles(conn, [])
            path, _ = await pl_path(conn, trusted)
            print("resolve() per statement at start, ms (first / again):")
            resolved = {}
            for name, sql in STATEMENTS.items():
                start = time.perf_counter()
                resolved[name] = await resolve(conn, sql, trusted)
                first = (time.perf_counter() - start) * 1000
                again = []
                for _ in range(20):
                    start = time.perf_counter()
                    await resolve(conn, sql, trusted)
                    again.append((time.perf_counter() - start) * 1000)
                print(f"  {name:16} {first:6.1f} / {statistics.median(again):5.1f}")
            sql = resolved["tool"].sql
            args = ("u7@x", None, 20)
            print(f"per call, one connection, {RUNS} calls each, interleaved, ms median / p95:")
            begin = "BEGIN READ ONLY; SET LOCAL statement_timeout = 30000"
            variants = {
                "before": (begin, False),
                "restricted path": (f"{begin}; {SET_RESTRICTED}", False),
                "+ PL path after prepare": (f"{begin}; {SET_RESTRICTED}", True),
            }
            samples: dict[str, list[float]] = {label: [] for label in variants}
            for n in range(RUNS + 20):
                for label, (text, switch) in variants.items():
                    start = time.perf_counter()
                    await conn.execute(text)
                    stmt = await conn.prepare(sql)
                    if switch:
                        await conn.fetchval(SET_PATH, path)
                    await stmt.fetch(*args)
                    await conn.execute("ROLLBACK")
                    if n >= 20:
                        samples[label].append((time.perf_counter() - start) * 1000)
            for label, taken in samples.items():
                print(f"  {label:24} {summary(taken)}")
        finally:
            await conn.close()


if __name__ == "__main__":
    asyncio.run(main())

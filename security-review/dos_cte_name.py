"""attack3 / control (held): a table the attacker creates in public with the name of a trusted
query's WITH name (`public.recent` for `WITH recent AS (...) SELECT * FROM recent`) neither
refuses the query nor keeps public on its path. Usage (bed and setup.py first):
  PYTHONPATH=tests:security-review uv run python security-review/dos_cte_name.py"""
import asyncio, json
import asyncpg
from mcpclient import connect
from common import DSN, as_role, tool
SQL = "WITH recent AS (SELECT id, name FROM users ORDER BY id DESC LIMIT 1) SELECT * FROM recent"
async def main():
    a = await asyncpg.connect(as_role("attacker"))
    await a.execute("DROP TABLE IF EXISTS public.recent")
    async with connect(as_role("reader")) as c:
        ok, body = await tool(c, "execute_query", sql=SQL); print("before:", ok, json.dumps(body.get("rows", body.get("error")))[:300])
        await a.execute("CREATE TABLE public.recent (id int)")
        ok, body = await tool(c, "execute_query", sql=SQL); print("after:", ok, json.dumps(body.get("rows", body.get("error")))[:400])
    await a.execute("DROP TABLE IF EXISTS public.recent"); await a.close()
asyncio.run(main())

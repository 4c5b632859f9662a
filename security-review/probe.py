"""Run SQL through execute_query (or another tool with JSON args). Usage: probe.py ROLE TOOL JSON_ARGS..."""
import asyncio
import json
import sys

from common import DSN, as_role, tool
from mcpclient import connect


async def main(role: str, name: str, args: list[str]) -> None:
    async with connect(DSN if role == "postgres" else as_role(role)) as c:
        for a in args:
            ok, body = await tool(c, name, **json.loads(a))
            print(ok, json.dumps(body.get("error", body.get("rows", body)) if isinstance(body, dict) else body)[:500])

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))

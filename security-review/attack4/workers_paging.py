"""attack4 / target 1 (correctness): `--workers 2` with the default memory store. Each worker
holds its own results; a client whose next request lands on a new connection (a proxy, an
HTTP client without keep-alive, a reconnect) reaches the other worker half the time, and its
cursor answers RESULT_EXPIRED there. Counts, over 20 cursors each read on a fresh connection.
Run: PYTHONPATH=tests:security-review:security-review/attack4 uv run python security-review/attack4/workers_paging.py
"""
import asyncio
import sys

import httpx2 as httpx
from common import DSN
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from paging_http import A, call
from test_http import serve

SQL = "SELECT g, repeat('y', 450) AS pad FROM generate_series(1, 400) g"


async def fresh(url: str):
    h = httpx.AsyncClient(headers={"Authorization": f"Bearer {A}"}, timeout=60)
    return h, Client(streamable_http_client(url, http_client=h))


async def main() -> int:
    expired = 0
    with serve(DSN, "--workers", "2", MCP_AUTH_TOKENS=A) as running:
        for _ in range(20):
            h1, c1 = await fresh(running.mcp)
            async with h1, c1:
                ok, out = await call(c1, "execute_query", sql=SQL)
                cur = out["next_cursor"]
            h2, c2 = await fresh(running.mcp)
            async with h2, c2:
                ok, out = await call(c2, "execute_query", cursor=cur)
                expired += not ok
    print(f"{expired} of 20 cursors read on a new connection answered RESULT_EXPIRED")
    print("FINDING" if expired else "held")
    return int(bool(expired))


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

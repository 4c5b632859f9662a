"""attack4 / target 3: similarity_search against redacted columns and through its filter.

Sets up pgvector and public.docs (a secret text column, an embedding, a vector column whose
name is sensitive), then, as the reader role, tries: the secret as text_column (hybrid
ranking as a dictionary oracle: does the right guess rank the row first?), the secret in the
filter, a sensitive vector column searched / MMR'd, filter $n tricks, injection through
identifiers. Prints each call's outcome; 'ORACLE' marks a leak.
Run: PYTHONPATH=tests:security-review uv run python security-review/attack4/vector_probe.py
"""
import asyncio
import json
import sys

import asyncpg
from common import DSN, as_role, tool
from mcpclient import connect

SETUP = """
CREATE EXTENSION IF NOT EXISTS vector;
DROP TABLE IF EXISTS public.docs;
CREATE TABLE public.docs (id int PRIMARY KEY, title text, password text, embedding vector,
                          secret_vec vector(3));
INSERT INTO public.docs SELECT g, 'doc ' || g, 'pw-' || g || CASE WHEN g = 7 THEN ' hunter2' ELSE '' END,
  (SELECT array_agg(((g * 31 + i) % 17)::float4 / 17)::vector FROM generate_series(1, 256) i),
  ARRAY[g, 0, 1]::vector(3)
FROM generate_series(1, 30) g;
GRANT SELECT ON public.docs TO reader;
"""


async def main() -> int:
    c = await asyncpg.connect(DSN)
    await c.execute(SETUP)
    await c.close()
    base = {"table_name": "docs", "column": "embedding", "limit": 30}
    qv = [0.5] * 256
    leaks = 0
    async with connect(as_role("reader")) as cl:
        for guess in ("hunter2", "wrongguess"):
            ok, body = await tool(cl, "similarity_search", **base, query_text=guess, text_column="password")
            first = body.get("rows", [[None]])[0] if ok else body["error"]
            print(f"hybrid text_column=password guess={guess}: ok={ok}", json.dumps(first)[:200])
            if ok and guess == "hunter2" and body["rows"][0][0] == 7:
                leaks += 1
                print("  ORACLE: the row whose secret matches ranks first")
        probes = {
            "filter on secret": dict(base, query_vector=qv, filter="password LIKE $1", filter_params=["%hunter2%"]),
            "filter on secret, no param": dict(base, query_vector=qv, filter="strpos(password, 'hunter2') > 0"),
            "filter subquery on users": dict(base, query_vector=qv, filter="EXISTS (SELECT 1 FROM users u WHERE u.password = 'hunter2')"),
            "sensitive vector column": dict(base, column="secret_vec", query_vector=[7, 0, 1]),
            "mmr over sensitive vector": dict(base, column="secret_vec", query_vector=[7, 0, 1], mmr_lambda=0.5),
            "filter $0": dict(base, query_vector=qv, filter="id = $0", filter_params=[1]),
            "filter uses our $ (given 0)": dict(base, query_vector=qv, filter="$1::text IS NOT NULL"),
            "filter with ; stacked": dict(base, query_vector=qv, filter="true; SELECT 1"),
            "filter closes paren": dict(base, query_vector=qv, filter="true) OR (true"),
            "filter comment": dict(base, query_vector=qv, filter="true --"),
            "ident injection table": dict(base, table_name='docs" t, users u --', query_vector=qv),
            "ident injection column": dict(base, query_vector=qv, columns=['title", u.password --']),
            "schema injection": dict(base, schema_name='public"."docs', query_vector=qv),
        }
        for what, args in probes.items():
            ok, body = await tool(cl, "similarity_search", **args)
            text = json.dumps(body)
            leak = "hunter2" in text and what != "filter on secret" or (
                what in ("sensitive vector column", "mmr over sensitive vector") and ok and body["rows"] and body["rows"][0][0] == 7)
            leaks += bool(leak and ok)
            print(f"{what}: ok={ok}", "LEAK" if leak and ok else "", text[:260])
    print("FINDING" if leaks else "held")
    return leaks


if __name__ == "__main__":
    sys.exit(asyncio.run(main()) and 1)

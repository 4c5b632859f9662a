"""attack5 F6 (availability) and control: similarity_search where pgvector lives in the open
schema public (its default when CREATE EXTENSION runs with legacy rights). Nothing planted
runs, but every statement is refused (`open_schema_code`), planted or not: the scout reads
asyncpg's type-lookup query with every statement, and its unqualified `=`, `<>`, `>`, `+`
have trusted candidates in public (pgvector's), which keeps public on the path. (Its own
`OPERATOR("public".<=>)` would be refused too.)
Usage: PYTHONPATH=tests:security-review:security-review/attack5 uv run python \
    security-review/attack5/vector_public.py"""
from __future__ import annotations

import asyncio
import sys

from common5 import ATTACKER, DSN, READER, execute, pwned, reset_db, tool
from mcpclient import connect

DBA = """
CREATE EXTENSION vector SCHEMA public;
CREATE TABLE app.docs (id int PRIMARY KEY, body varchar(40), emb public.vector(3));
INSERT INTO app.docs VALUES (1, 'a', '[1,0,0]'), (2, 'b', '[0,1,0]');
CREATE INDEX ON app.docs USING hnsw (emb public.vector_l2_ops);
GRANT SELECT ON app.docs TO reader;
"""
PLANT = """
CREATE FUNCTION atk.vd(public.vector, varchar) RETURNS float8 IMMUTABLE LANGUAGE sql
    AS 'SELECT length(atk.effect())::float8';
CREATE OPERATOR public.<-> (LEFTARG = public.vector, RIGHTARG = varchar, FUNCTION = atk.vd);
"""


async def main() -> int:
    await reset_db()
    await execute(DSN, DBA)
    found = 0
    async with connect(READER) as c:
        for when in ("clean", "planted"):
            if when == "planted":
                await execute(ATTACKER, PLANT)
            for label, args in {
                "vector only": {},
                "with filter": {"filter": "body = 'a'::varchar"},
            }.items():
                ok, body = await tool(c, "similarity_search", table_name="docs", schema_name="app",
                                      column="emb", query_vector=[1.0, 0.0, 0.0], limit=2, **args)
                tag = "FINDING" if pwned(body) else "held"
                found += tag == "FINDING"
                print(f"{tag}: {when} similarity_search {label}: ok={ok} {str(body)[:200]}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
